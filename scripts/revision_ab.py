"""A/B of this tree's row-operator forwards against another revision's, on a GPU.

A few minutes in one process; prints a table and writes nothing else::

    mkdir -p /tmp/base && for f in plans.py ops/softmax.py ops/rms_norm.py ops/row_sum.py; do
        git show REV:src/kernel_portfolio/$f > /tmp/base/$(basename $f); done
    python scripts/revision_ab.py /tmp/base --label REV \\
        > results/h200/checks/revision-ab-<UTC stamp>.log

The baseline folder holds another revision's ``plans.py`` and any of
``softmax.py``, ``rms_norm.py`` and ``row_sum.py``. They are imported as a
package of their own (``kp_baseline``: their ``plans`` import points at the
baseline's ``plans.py``, their custom ops are renamed ``kp_baseline::*`` so
that both revisions register), and everything else they import is this
tree's. For every case of an operator found there, this times both
revisions' forward launchers, with the plan this tree's rule chooses, on the
same inputs, visited in alternating order (six visits of twenty samples),
each call with a cold L2 and a device spin ahead of its start event; the
outputs are compared bit for bit. The share of copy bandwidth counts the
compulsory bytes, as the suite does. The last lines give, per operator, the
mean change of the median time. A diagnostic for the performance notes: the
site quotes the benchmark results, never this.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from ab_support import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import runner, timing
from kernel_portfolio.ops import rms_norm, row_sum, softmax

PACKAGE = "kp_baseline"
OPS = ("softmax", "rms_norm", "row_sum")
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
#: ``operator: ((variant, rows, columns, dtype), ...)``; a variant names the
#: RMSNorm's inputs and outputs (``plain``, ``rstd``: the forward that keeps
#: ``rstd`` for a backward, ``residual``).
CASES = {
    "softmax": (
        *(("", 8192, 8192, d) for d in (F16, BF16, F32)),
        ("", 32768, 8192, F16),
        ("", 16384, 4104, F16),
        ("", 32768, 1024, F16),
        ("", 16384, 2048, F16),
        ("", 4096, 16384, F16),
        ("", 65536, 512, F16),
        ("", 512, 4096, F16),
        ("", 32, 127, F16),
    ),
    "rms_norm": (
        *(("plain", 8192, 8192, d) for d in (BF16, F16)),
        ("plain", 32768, 8192, BF16),
        ("plain", 16384, 4104, BF16),
        ("plain", 32768, 1024, BF16),
        ("rstd", 8192, 8192, BF16),
        ("residual", 8192, 8192, BF16),
        ("residual", 32768, 8192, BF16),
        ("residual", 16384, 4104, BF16),
        ("plain", 512, 4096, BF16),
        ("plain", 64, 131072, BF16),  # split plans
        ("rstd", 64, 131072, BF16),
        ("residual", 64, 131072, BF16),
    ),
    "row_sum": (
        *(("", 16384, 8192, d) for d in (F16, BF16, F32)),
        ("", 16384, 4104, F16),
        ("", 32768, 1024, F16),
        ("", 65536, 512, F16),
        ("", 32, 127, F16),
        ("", 64, 131072, F16),
        ("", 132, 65536, BF16),
        ("", 4, 32769, F16),
    ),
}


def load_baseline(folder: Path) -> dict:
    """The baseline's operator modules found in ``folder``, imported as ``kp_baseline.*``."""
    if not (folder / "plans.py").is_file():
        raise SystemExit(f"revision_ab: {folder} has no plans.py")
    package = Path(tempfile.mkdtemp()) / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    for path in folder.glob("*.py"):
        text = path.read_text()
        text = text.replace("from kernel_portfolio import plans", f"from {PACKAGE} import plans")
        text = text.replace('"kp::', f'"{PACKAGE}::').replace(
            "torch.ops.kp.", f"torch.ops.{PACKAGE}."
        )
        (package / path.name).write_text(text)
    sys.path.insert(0, str(package.parent))
    return {
        op: importlib.import_module(f"{PACKAGE}.{op}")
        for op in OPS
        if (package / f"{op}.py").is_file()
    }


def forward(module, op: str, x: torch.Tensor, extra: dict):
    """A callable running ``module``'s forward launcher for ``x`` into preallocated outputs."""
    plan = plans.choose_for(x)
    if op == "softmax":
        return lambda: module._launch_forward(x, extra["y"], plan)
    if op == "row_sum":
        return lambda: module._launch_row_sum(x, extra["out"], plan)
    return lambda: module._forward(
        x,
        extra.get("residual"),
        extra["w"],
        runner.EPS,
        plan,
        extra["y"],
        extra.get("h"),
        extra.get("rstd"),
    )


def inputs(
    op: str, variant: str, m: int, n: int, dtype: torch.dtype
) -> tuple[torch.Tensor, dict, int]:
    """``(x, outputs and other inputs, compulsory bytes)`` of one case."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    size = x.element_size()
    if op == "row_sum":
        return x, {"out": torch.empty(m, device="cuda", dtype=dtype)}, m * n * size + m * size
    extra = {"y": torch.empty_like(x)}
    if op == "softmax":
        return x, extra, 2 * m * n * size
    extra["w"] = torch.rand(n, device="cuda", dtype=dtype) + 0.5
    if variant == "residual":
        extra |= {"residual": torch.randn_like(x), "h": torch.empty_like(x)}
        return x, extra, 4 * m * n * size + n * size
    if variant == "rstd":
        extra["rstd"] = torch.empty(m, device="cuda", dtype=torch.float32)
        return x, extra, 2 * m * n * size + n * size + 4 * m
    return x, extra, 2 * m * n * size + n * size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="folder of the baseline revision's files")
    parser.add_argument("--label", default="baseline", help="the baseline's name in the log")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline)
    flush, copy_gbps = setup("revision_ab")
    current = {"softmax": softmax, "rms_norm": rms_norm, "row_sum": row_sum}
    print(f"\nbaseline {args.label}: {', '.join(baseline)}; this tree: the other column")
    print(f"{'case':<34} {'plan':<16} {'revision':<10} {'median us':>10} {'% copy':>7} {'diff':>5}")
    changes = {op: [] for op in baseline}
    for op, module in baseline.items():
        for variant, m, n, dtype in CASES[op]:
            x, extra, moved = inputs(op, variant, m, n, dtype)
            outputs = [t for k, t in extra.items() if k in ("y", "h", "out", "rstd")]
            calls = {
                args.label: forward(module, op, x, extra),
                "this tree": forward(current[op], op, x, extra),
            }
            results = {}
            for name, call in calls.items():
                for t in outputs:
                    t.fill_(float("nan"))
                call()
                results[name] = [t.clone() for t in outputs]
            same = all(torch.equal(a, b) for a, b in zip(*results.values(), strict=True))
            lead = timing.lead_for(calls["this tree"])
            medians = interleaved_medians(calls, flush, lead)
            plan = plans.choose_for(x)
            label = " ".join(w for w in (op, variant, f"{m}x{n}", str(dtype)[6:]) if w)
            for name, median in medians.items():
                pct = 100 * moved / median / 1e6 / copy_gbps
                print(
                    f"{label:<34} {f'{plan.kind}-{plan.block}-w{plan.num_warps}':<16} "
                    f"{name:<10} {median * 1e3:>10.2f} {pct:>6.1f}% {'same' if same else 'DIFF':>5}"
                )
            changes[op].append(medians["this tree"] / medians[args.label] - 1)
            torch.cuda.empty_cache()
    print(f"\nmean change of the median time, this tree against {args.label}:")
    for op, c in changes.items():
        best, worst = 100 * min(c), 100 * max(c)
        print(f"  {op}: {100 * statistics.mean(c):+.2f}% (best {best:+.2f}%, worst {worst:+.2f}%)")


if __name__ == "__main__":
    main()
