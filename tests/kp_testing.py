"""Helpers that judge correctness in the kernel tests.

Each one is itself tested against a deliberately broken kernel
(``tests/test_kp_testing.py``): a checker that cannot fail is a defect.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import subprocess
import sys
import tempfile

import torch

from kernel_portfolio import plans
from kernel_portfolio.bench import suites
from kernel_portfolio.bench.runner import tolerance
from kernel_portfolio.reference import rel_error

#: Relative-error bound (||out - ref|| / ||ref|| against float64) per dtype.
REL_TOL = {getattr(torch, name): tol for name, tol in suites.REL_TOL.items()}


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with NaN in place (an unwritten output then shows) and return it."""
    return t.fill_(float("nan"))


def assert_matches(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype,
    what: str = "output",
    tol: float | None = None,
):
    """Assert ``out`` matches the float64 ``ref`` within the harness's bound.

    The bound is :func:`kernel_portfolio.bench.runner.tolerance`: ``REL_TOL[dtype]``,
    or twice the error of ``ref`` rounded to ``dtype`` where that is larger.

    NaN in ``out`` fails unless the reference is NaN at that place (a fully
    masked softmax row), and then ``out`` must be NaN there too. ``tol``
    overrides the bound where an operator's error depends on the problem
    (a GEMM's on its inner dimension).
    """
    if out.shape != ref.shape:
        raise AssertionError(f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    err = rel_error(out, ref)
    tol = tolerance(ref, str(dtype).removeprefix("torch.")) if tol is None else tol
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3g} > {tol:g} for {dtype}")


def first_batch_of_each_form(
    batches, width: int, elem_bytes: int, plan, sm_count: int, extra=lambda rows: ()
) -> list:
    """The first of ``batches`` (row counts) for each compiled form the row kernels take.

    A form is the plan ``plans.choose`` gives at ``width`` (its kind, chunk and
    warps: the compile-time constants; the split count is a runtime argument),
    for a split plan whether its programs fit the SMs with one chunk each
    (the softmax forward's cooperative launch, ``softmax._cooperative``), and
    what ``extra(rows)`` adds (an operator's own size rules: RMSNorm's shifted
    weight). A new batch size must compile nothing once each form has run.
    """
    firsts = {}
    for rows in batches:
        chosen = plans.choose(rows, width, elem_bytes=elem_bytes, sm_count=sm_count, plan=plan)
        per_program, n_splits = plans.split_segments(width, chosen)
        together = chosen.kind == "split" and per_program == 1 and rows * n_splits <= sm_count
        form = (chosen.kind, chosen.block, chosen.num_warps, together, *extra(rows))
        firsts.setdefault(form, rows)
    return list(firsts.values())


def views_past_2_31(device, dtype: torch.dtype = torch.float16):
    """Two small matrices whose element offsets pass 2^31, to test int64 indexing.

    ``rows`` is 3 x 64 with rows 2^30 elements apart; ``cols`` is 4 x 3 with
    columns 2^30 apart. Both live in one 8 GiB allocation, of which a CPU backs
    only the few pages touched. They start 2^31 elements in, so an offset
    computed in int32 wraps back inside the allocation, onto elements set to 7:
    a wrong answer that a comparison reports, not a crash.
    """
    span = torch.empty(2**32 + 64, dtype=dtype, device=device)
    span[:64] = 7
    base = span[2**31 :]
    rows = base.as_strided((3, 64), (2**30, 1))
    cols = base.as_strided((4, 3), (1, 2**30))
    rows.copy_(torch.randn(3, 64, device=device))
    cols.copy_(torch.randn(4, 3, device=device))
    return rows, cols


def _intercept_launches(monkeypatch, modules, on_launch) -> None:
    """Replace ``launchable`` in ``modules``: each launch becomes a call of
    ``on_launch(kernel, grid, args, kwargs)``, whose result it returns."""

    class Intercepted:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            return lambda *args, **kwargs: on_launch(self.kernel, grid, args, kwargs)

    for module in modules:
        monkeypatch.setattr(module, "launchable", Intercepted)


def record_launches(monkeypatch, module) -> list[tuple[str, tuple, dict]]:
    """Record every kernel launch of ``module`` (an ``ops`` module), then run it.

    Replaces the module's ``launchable``; returns the list that each launch
    appends ``(kernel name, grid, keyword arguments)`` to.
    """
    launches, launchable = [], module.launchable

    def record_and_run(kernel, grid, args, kwargs):
        launches.append((kernel.fn.__name__, tuple(grid), kwargs))
        return launchable(kernel)[grid](*args, **kwargs)

    _intercept_launches(monkeypatch, [module], record_and_run)
    return launches


#: Triton's name of each tensor dtype, in a pointer type (``*fp16``).
_TRITON_DTYPES = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.int64: "i64",
    torch.int32: "i32",
}


def captured_launches(monkeypatch, modules, call) -> list[dict]:
    """The kernel launches ``call()`` makes through ``modules``' ``launchable``, unrun.

    Returns one :func:`global_memory_ops` spec a launch (with ``"registers"``),
    holding its kernel, its argument ``values``, ``num_warps``, ``maxnreg``
    and a ``grid``. A tensor's value is its pointer type and whether its
    address is 16-byte aligned; a runtime integer's is a representative of
    what Triton specialises on (1, a multiple of 16, other; and 64-bit), so
    equal specs compile to the same code. The kernels do not run, so ``call``
    may launch on full size CPU tensors; their outputs stay as allocated.
    """
    specs = []

    def capture(kernel, grid, args, kwargs):
        params = inspect.signature(kernel.fn).parameters
        values = dict(zip(params, args, strict=False))
        values |= {name: value for name, value in kwargs.items() if name in params}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                pointer = "*" + _TRITON_DTYPES[value.dtype]
                values[name] = {"pointer": pointer, "aligned": value.data_ptr() % 16 == 0}
            elif type(value) is int and "constexpr" not in str(params[name].annotation):
                wide = 0 if -(2**31) <= value < 2**31 else 2**32
                values[name] = 1 if value == 1 else wide + (16 if value % 16 == 0 else 17)
        specs.append(
            {
                "module": kernel.fn.__module__,
                "kernel": kernel.fn.__name__,
                "values": {name: values.get(name) for name in params},
                "num_warps": kwargs.get("num_warps", 4),
                "maxnreg": kwargs.get("maxnreg"),
                "grid": list(grid),
                "registers": True,
            }
        )

    _intercept_launches(monkeypatch, modules, capture)
    call()
    return specs


_COMPILE_FOR_SM90 = r"""
import importlib, json, re, subprocess, sys, tempfile, traceback
import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import ASTSource
from kernel_portfolio.arch import ptxas_for


def specialized(fn, values):
    # As Triton's launcher: an int 1 becomes a constexpr, a multiple of 16
    # (or a 16-byte aligned pointer) gets tt.divisibility, unless the kernel
    # says do_not_specialize.
    signature, consts, aligned = {}, {}, []
    for p in fn.params:
        value = values[p.name]
        if p.is_constexpr:
            consts[p.name] = value
        elif isinstance(value, dict):  # a tensor
            signature[p.name] = value["pointer"]
            if value["aligned"]:
                aligned.append(p.name)
        else:
            kind, key = native_specialize_impl(
                BaseBackend, value, False, not p.do_not_specialize,
                not p.do_not_specialize_on_alignment,
            )
            if kind == "constexpr":
                consts[p.name] = value
            else:
                signature[p.name] = kind
                if key == "D":
                    aligned.append(p.name)
    return signature, consts, aligned


sys.path.insert(0, sys.argv[1])  # the tests folder: test modules may hold kernels too


def global_ops(spec):
    fn = getattr(importlib.import_module(spec["module"]), spec["kernel"])
    if "values" in spec:
        spec["signature"], spec["constexprs"], spec["aligned"] = specialized(fn, spec["values"])
    attrs = {
        (fn.arg_names.index(a),): [["tt.divisibility", 16]]
        for a in spec["aligned"]
        if a in fn.arg_names
    }
    signature = {n: spec["signature"].get(n, "constexpr") for n in fn.arg_names}
    consts = {n: v for n, v in spec["constexprs"].items() if n in fn.arg_names}
    source = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    options = {k: spec[k] for k in ("num_warps", "num_stages", "maxnreg") if spec.get(k)}
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    ops, counts = set(), {}
    for op in re.findall(r"(?:ld|st)\.global[.:\w]*", ptx):
        # An eviction hint (ld.global.L1::evict_first.L2::cache_hint.v4.b32): the
        # opcode without it, and the hint apart (ld.evict_first).
        ops |= {f"{op[:2]}.{hint}" for hint in re.findall(r"\.L1::(\w+)", op)}
        plain = re.sub(r"\.L[12]::\w+", "", op)
        ops.add(plain)
        counts[plain] = counts.get(plain, 0) + 1
    if spec.get("counts"):
        ops |= {f"{op}#{n}" for op, n in counts.items()}
    if spec.get("order"):  # global loads (ld), stores (st) and barriers (bar), in PTX order
        sequence = re.findall(r"\b(ld|st)\.global|\b(bar)\.sync", ptx)
        ops.add("order." + ",".join(a or b for a, b in sequence))
    copies = re.findall(r"cp\.async\.\w+\.shared\.global[^;]*?,\s*(0x[0-9a-fA-F]+|\d+)\s*[,;]", ptx)
    ops |= {f"cp.async.{int(n, 0)}" for n in copies}
    if spec.get("registers"):  # ptxas -v: the assembler Triton itself runs (arch.ptxas_for)
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/k.ptx", "w") as fh:
                fh.write(ptx)
            cmd = [str(ptxas_for(90)), "-v", "--gpu-name", "sm_90a", f"{tmp}/k.ptx"]
            cmd += ["-o", f"{tmp}/k.o"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        ops.add("registers." + re.search(r"Used (\d+) registers", out).group(1))
        ops.add("spills." + re.search(r"(\d+) bytes spill stores", out).group(1))
    return sorted(ops)


# One request a line (a JSON list of specs), one answer a line: the ops of each
# spec, or the error that stopped them. The process lives as long as its parent.
for request in sys.stdin:
    try:
        answer = {"ops": [global_ops(spec) for spec in json.loads(request)]}
    except Exception:
        answer = {"error": traceback.format_exc()}
    print(json.dumps(answer), flush=True)
"""


def global_memory_ops(specs: list[dict]) -> list[list[str]]:
    """Compile kernels for sm_90 on the CPU and list each one's global loads and stores.

    Each spec names ``module``, ``kernel``, a ``signature`` of its runtime
    arguments (``{"x_ptr": "*fp16", "n_cols": "i32"}``), its ``constexprs``,
    the pointers Triton may take as 16-byte ``aligned`` (as it does for fresh
    torch tensors), ``num_warps`` and optionally ``num_stages`` and
    ``maxnreg``; names the kernel lacks (in the signature, the constexprs and
    ``aligned``) are ignored. A spec from :func:`captured_launches` gives
    the launch's argument ``values`` instead of the signature, constexprs and
    ``aligned``, and is specialised as Triton's launcher would. The compiles
    run in one child process (per test process) without ``TRITON_INTERPRET``, using the ptxas
    bundled with triton; no GPU.
    Returns, per spec, the distinct PTX opcodes such as ``ld.global.v4.b32``,
    and ``cp.async.<bytes>`` for each size of asynchronous global-to-shared
    copy (the pipelined loads of a GEMM): ``cp.async.16`` is a 16-byte load.
    A load or store with an eviction hint is listed without it, and the hint
    apart: ``ld.global.L1::evict_first.L2::cache_hint.v4.b32`` gives
    ``ld.global.v4.b32`` and ``ld.evict_first``.
    A spec with ``"registers": True`` also gets ``registers.<n>``: the
    registers per thread that ``ptxas -v`` reports for sm_90a, and
    ``spills.<n>``: the bytes it spills to local memory (stores). A spec with
    ``"counts": True`` also gets ``<opcode>#<n>`` for each global load and
    store opcode: its instructions in the PTX (``ld.global.v4.b32#4``). A
    spec with ``"order": True`` also gets ``order.<sequence>``: its global
    loads, stores and barriers in PTX order (``order.ld,ld,bar,st``).
    """
    key = json.dumps(specs, sort_keys=True)
    if key not in _compiled:
        child = _compile_child()
        child.stdin.write(json.dumps(specs) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            child.log.seek(0)
            raise AssertionError(f"the sm_90 compile process died:\n{child.log.read()[-3000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"compiling for sm_90 failed:\n{answer['error'][-3000:]}")
        _compiled[key] = answer["ops"]
    return _compiled[key]


#: Answers of :func:`global_memory_ops`, by request: the kernels' sources do not
#: change while the tests run.
_compiled: dict[str, list[list[str]]] = {}


@functools.cache
def _compile_child() -> subprocess.Popen:
    """The one process that compiles for sm_90 (started once: importing Triton
    costs about two seconds), without ``TRITON_INTERPRET``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # Its stderr, read if it dies; open as long as the child lives (no with block).
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115
    child = subprocess.Popen(
        [sys.executable, "-c", _COMPILE_FOR_SM90, os.path.dirname(__file__)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    child.log = log
    return child
