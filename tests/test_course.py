"""The course: solutions pass, starters report TODO, and every checker rejects broken kernels.

The broken variants are made by text-replacing the reference solutions (the
``MUTANTS`` table), so each one differs from a passing kernel by one bug. Each
must be reported as FAIL: a checker that lets one through could not have caught
that bug in a learner's kernel.
"""

from __future__ import annotations

import argparse
import os
import re

import pytest
import torch

from kernel_portfolio.course import EXERCISES, cli, exercise, packaged_file
from kernel_portfolio.course.checkers import (
    FAIL,
    PASS,
    TODO,
    apply_mutation,
    grouped_order,
    run,
    todo_lines,
)
from kernel_portfolio.errors import UserError

pytestmark = pytest.mark.interpreter

NAMES = [ex.name for ex in EXERCISES]

#: name -> [(the bug, [(text in the solution, replacement, occurrences)])]
MUTANTS: dict[str, list[tuple[str, list[tuple[str, str, int]]]]] = {
    "add": [
        (
            "store without mask",
            [
                (
                    "tl.store(out_ptr + offsets, x + y, mask=mask)",
                    "tl.store(out_ptr + offsets, x + y)",
                    1,
                )
            ],
        ),
        ("no mask anywhere", [(", mask=mask)", ")", 3)]),
        ("off-by-one program id", [("offsets = pid * BLOCK", "offsets = (pid + 1) * BLOCK", 1)]),
        ("mask <= n", [("offsets < n_elements", "offsets <= n_elements", 1)]),
        ("grid rounds down", [("triton.cdiv(n_elements, block)", "n_elements // block", 1)]),
    ],
    "add2d": [
        ("x column stride ignored", [("cols[None, :] * stride_xn", "cols[None, :]", 1)]),
        (
            "y row stride ignored (broadcast)",
            [("rows[:, None] * stride_ym", "rows[:, None] * N", 1)],
        ),
        (
            "rows masked, columns not",
            [("mask = (rows[:, None] < M) & (cols[None, :] < N)", "mask = rows[:, None] < M", 1)],
        ),
        (
            "program axes swapped",
            [("(0)\n    pid_n = tl.program_id(1)", "(1)\n    pid_n = tl.program_id(0)", 1)],
        ),
        ("out addressed with x's strides", [("*out.stride()", "*x.stride()", 1)]),
    ],
    "row_sum": [
        (
            "float16 accumulator",
            [
                ("dtype=tl.float32", "dtype=tl.float16", 1),
                ("x.to(tl.float32)", "x.to(tl.float16)", 1),
            ],
        ),
        ("unmasked load", [("mask=cols < n_cols, other=0.0", "", 1)]),
        (
            "off-by-one program id",
            [
                (
                    "row = tl.program_id(0).to(tl.int64)",
                    "row = (tl.program_id(0) + 1).to(tl.int64)",
                    1,
                )
            ],
        ),
        ("row stride assumed n_cols", [("row * stride_xm", "row * n_cols", 1)]),
        ("column stride ignored", [("cols * stride_xn", "cols", 1)]),
        ("one chunk only", [("range(0, n_cols, BLOCK)", "range(0, BLOCK, BLOCK)", 1)]),
    ],
    "softmax": [
        (
            "missing -inf guard (right only for finite rows)",
            [('shift = tl.where(m_new == float("-inf"), 0.0, m_new)', "shift = m_new", 1)],
        ),
        ("tail padded with 0", [('other=float("-inf")', "other=0.0", 2)]),
        ("no max subtraction", [("row_max = tl.max(m, axis=0)", "row_max = 0.0", 1)]),
        (
            "fully masked row gives 0, not NaN",
            [
                (
                    "y = tl.exp(x - row_max) / row_sum",
                    "y = tl.where(row_sum > 0, tl.exp(x - row_max) / row_sum, 0.0)",
                    1,
                )
            ],
        ),
        ("old sum not rescaled", [("s = s * tl.exp(m - shift) + ", "s = s + ", 1)]),
        ("unmasked store", [(", mask=cols < n_cols)\n", ")\n", 1)]),
        ("out addressed with x's row stride", [("row * stride_om", "row * stride_xm", 1)]),
        (
            "off-by-one program id",
            [
                (
                    "row = tl.program_id(0).to(tl.int64)",
                    "row = (tl.program_id(0) + 1).to(tl.int64)",
                    1,
                )
            ],
        ),
    ],
    "rms_norm": [
        (
            "float16 statistics",
            [(".to(tl.float32)\n    w = tl.load(w_ptr", "\n    w = tl.load(w_ptr", 1)],
        ),
        ("sum instead of mean", [("/ n_cols + eps", "+ eps", 1)]),
        ("weight ignored", [("y = x * rstd * w\n", "y = x * rstd\n", 1)]),
        ("atomic dw", [("tl.store(dw_partial_ptr", "tl.atomic_add(dw_partial_ptr", 1)]),
        ("dx without the row term", [("dx = (g - xhat * c) * rstd", "dx = g * rstd", 1)]),
        (
            "unmasked x load in the backward",
            [
                (
                    "cols, mask=mask, other=0.0).to(tl.float32)\n            dy",
                    "cols).to(tl.float32)\n            dy",
                    1,
                )
            ],
        ),
        ("rows past n_rows counted", [("if row < n_rows:", "if row <= n_rows:", 1)]),
        ("every program writes dw row 0", [("dw_partial_ptr + pid * n_cols", "dw_partial_ptr", 1)]),
        (
            "off-by-one program id",
            [
                (
                    "row = tl.program_id(0).to(tl.int64)",
                    "row = (tl.program_id(0) + 1).to(tl.int64)",
                    1,
                )
            ],
        ),
    ],
    "matmul": [
        (
            "float16 accumulator",
            [
                ("dtype=tl.float32)", "dtype=tl.float16)", 1),
                ("tl.dot(a, b, acc)", "tl.dot(a, b, acc, out_dtype=tl.float16)", 1),
            ],
        ),
        (
            "K tail of a unmasked",
            [("(rm[:, None] < M) & (rk[None, :] < K - k)", "rm[:, None] < M", 1)],
        ),
        (
            "K tail of b unmasked",
            [("(rk[:, None] < K - k) & (rn[None, :] < N)", "rn[None, :] < N", 1)],
        ),
        (
            "short last group ignored",
            [("num_pid_in_group) % group_size_m", "num_pid_in_group) % GROUP_M", 1)],
        ),
        (
            "row-major order",
            [
                (
                    "first_pid_m + (pid % num_pid_in_group) % group_size_m\n"
                    "    pid_n = (pid % num_pid_in_group) // group_size_m",
                    "pid // num_pid_n\n    pid_n = pid % num_pid_n",
                    1,
                )
            ],
        ),
        (
            "b assumed contiguous",
            [
                (
                    "rk[:, None] * stride_bk + rn[None, :] * stride_bn",
                    "rk[:, None] * N + rn[None, :]",
                    1,
                )
            ],
        ),
        (
            "store without mask",
            [
                (
                    "tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))",
                    "tl.store(c_ptrs, c)",
                    1,
                )
            ],
        ),
        ("b not advanced along K", [("        b_ptrs += BLOCK_K * stride_bk\n", "", 1)]),
    ],
    "measure": [
        (
            "wall clock: no synchronize before",
            [("    torch.cuda.synchronize()  # earlier", "    pass  # earlier", 1)],
        ),
        (
            "wall clock: no synchronize after",
            [("    torch.cuda.synchronize()  # the launch", "    pass  # the launch", 1)],
        ),
        ("event read before it happened", [("    end.synchronize()", "    pass", 1)]),
        (
            "end event recorded before the call",
            [("    fn()\n    end.record()", "    end.record()\n    fn()", 1)],
        ),
        ("no warm-up", [("        fn()  # warm-up", "        pass  # warm-up", 1)]),
        (
            "flush inside the timed call",
            [
                (
                    "samples[name].append(timer(fns[name]))",
                    "samples[name].append(timer(lambda fn=fns[name]: (flush(), fn())))",
                    1,
                )
            ],
        ),
        ("same order every visit", [("        rng.shuffle(names)\n", "", 1)]),
        (
            "all samples of one function in a row",
            [
                (
                    "    for _ in range(visits):\n        rng.shuffle(names)\n"
                    "        for name in names:\n",
                    "    for name in names:\n        for _ in range(visits):\n",
                    1,
                )
            ],
        ),
        ("GiB instead of GB", [("/ 1e9", "/ 2**30", 1)]),
        ("milliseconds taken as seconds", [("(ms * 1e-3)", "ms", 1)]),
    ],
    "mutants": [
        (
            "no guard check",
            [
                (
                    "    assert (buffer[n:] == SENTINEL).all()",
                    "    assert True or (buffer[n:] == SENTINEL).all()",
                    1,
                )
            ],
        ),
        ("length a multiple of the block", [("n = 1000", "n = 1024", 1)]),
        (
            "zeros as input",
            [("x = torch.randn(n, device=device)", "x = torch.zeros(n, device=device)", 1)],
        ),
        ("alpha of 1", [("alpha = 1.5", "alpha = 1.0", 1)]),
        ("loose tolerance", [("rtol=1e-6", "rtol=1e-2", 1)]),
        (
            "rejects a correct kernel",
            [("want = (x.double() * alpha)", "want = (x.double() * alpha * 2)", 1)],
        ),
    ],
}

MUTANT_CASES = [
    pytest.param(name, edits, id=f"{name}: {bug}")
    for name, cases in MUTANTS.items()
    for bug, edits in cases
]


def check_file(name: str, path) -> tuple[int, str]:
    outcome = run(name, path)
    return outcome.code, "\n".join(outcome.lines)


def test_every_exercise_has_mutants():
    assert set(MUTANTS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes(name):
    with packaged_file("solutions", exercise(name)) as path:
        code, text = check_file(name, path)
    assert code == PASS, text


@pytest.mark.parametrize("name", NAMES)
def test_starter_reports_todo(name):
    with packaged_file("starters", exercise(name)) as path:
        code, text = check_file(name, path)
    assert code == TODO, text
    assert text.startswith(f"TODO: {exercise(name).filename} line ")


@pytest.mark.parametrize("name", NAMES)
def test_starter_with_todo_lines_deleted_fails(name, tmp_path):
    """Deleting the TODO lines without writing the code must not pass."""
    ex = exercise(name)
    with packaged_file("starters", ex) as path:
        source = path.read_text(encoding="utf-8")
    todo = {number for number, _ in todo_lines(source)}
    kept = [line for n, line in enumerate(source.splitlines(), start=1) if n not in todo]
    target = tmp_path / ex.filename
    target.write_text("\n".join(kept) + "\n", encoding="utf-8")
    code, text = check_file(name, target)
    assert code == FAIL, text


@pytest.mark.parametrize("name", NAMES)
def test_starter_keeps_the_solution_names(name):
    """A learner's file is called through the names the solution defines."""
    ex = exercise(name)
    defined = {}
    for kind in ("starters", "solutions"):
        with packaged_file(kind, ex) as path:
            defined[kind] = set(re.findall(r"^def (\w+)", path.read_text(), flags=re.M))
    assert defined["starters"] == defined["solutions"]


@pytest.mark.parametrize(("name", "edits"), MUTANT_CASES)
def test_checker_rejects_mutant(name, edits, tmp_path):
    ex = exercise(name)
    with packaged_file("solutions", ex) as path:
        source = path.read_text(encoding="utf-8")
    for old, new, count in edits:
        source = apply_mutation(source, old, new, count)
    target = tmp_path / ex.filename
    target.write_text(source, encoding="utf-8")
    code, text = check_file(name, target)
    assert code == FAIL, text
    assert "hint: " in text


def test_apply_mutation_refuses_a_missing_or_repeated_pattern():
    with pytest.raises(ValueError, match="found 0"):
        apply_mutation("a = 1\n", "b = 2", "b = 3")
    with pytest.raises(ValueError, match="found 2"):
        apply_mutation("a\na\n", "a", "b")


def test_todo_lines_find_only_todo_comments():
    source = "x = 1  # TODO later\n    # TODO: write this\n# todo lower case\n#TODO\n"
    assert todo_lines(source) == [(2, "# TODO: write this"), (4, "#TODO")]


def test_grouped_order_walks_groups_column_by_column():
    # Three tile rows, two tile columns, groups of two rows: the last group has one row.
    assert grouped_order(3, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


# --------------------------------------------------------------------------- CLI


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kp")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_init_copies_every_starter_and_refuses_to_overwrite(tmp_path, capsys):
    folder = tmp_path / "my-course"
    args = parse(["course", "init", str(folder)])
    assert args.func(args) == 0
    for ex in EXERCISES:
        with packaged_file("starters", ex) as starter:
            assert (folder / ex.filename).read_bytes() == starter.read_bytes()
    assert "kp check add --dir" in capsys.readouterr().out

    (folder / "01_add.py").write_text("my work\n")
    with pytest.raises(UserError, match="already exists"):
        args.func(args)
    assert (folder / "01_add.py").read_text() == "my work\n"

    args = parse(["course", "init", str(folder), "--force"])
    assert args.func(args) == 0
    assert "my work" not in (folder / "01_add.py").read_text()


def test_check_reports_user_mistakes(tmp_path):
    args = parse(["check", "nope", "--dir", str(tmp_path)])
    with pytest.raises(UserError, match="no exercise named 'nope'"):
        args.func(args)
    args = parse(["check", "add", "--dir", str(tmp_path)])
    with pytest.raises(UserError, match="kp course init"):
        args.func(args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU path of kp check")
def test_check_runs_the_interpreter_in_a_child_process(tmp_path, monkeypatch):
    """The child process gets TRITON_INTERPRET even when this one lacks it; codes pass through."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    args = parse(["course", "init", str(tmp_path)])
    args.func(args)
    args = parse(["check", "add", "--dir", str(tmp_path)])
    assert args.func(args) == TODO
    solution = parse(["check", "add", "--solution"])
    assert solution.func(solution) == PASS
    assert "TRITON_INTERPRET" not in os.environ
