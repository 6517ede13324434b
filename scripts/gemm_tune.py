"""Tune the Hopper GEMM path: every candidate config against cuBLAS.

Run on the H200 (about 2-3 minutes, most of it compiling)::

    python scripts/gemm_tune.py --out results/h200/gemm_tune.json

CPU plumbing check (Triton interpreter, tiny sizes, seconds; no timings)::

    TRITON_INTERPRET=1 python scripts/gemm_tune.py --dry-run --out /tmp/gemm_tune.json

For each shape and dtype in ``SHAPES`` x (float16, bfloat16) it times, with
``triton.testing.do_bench`` (the L2 cleared before every call, median of about
100 ms of calls after 25 ms of warm-up):

* ``torch.mm`` (cuBLAS), before and after the configs, so the spread between
  the two says how much of a ratio is noise;
* the Hopper path of ``kp.matmul`` forced to each config of
  ``kernel_portfolio.ops.matmul.TMA_CONFIGS``, its output checked against a
  float32 product of the same inputs;
* ``kp.matmul`` as users get it (autotuned over that list), with the config
  the tuner picked;
* forward + backward through autograd, ``kp.matmul`` against ``torch.mm``
  (host-bound where three launches and autograd take longer on the CPU than
  the products on the GPU), and each backward product alone (``dA = dC @
  B^T`` and ``dB = A^T @ dC`` with the transposed operand read in place),
  against ``torch.mm`` on the same views.

Candidate configs are launched directly, outside the ``kp::matmul`` op, with
``wrap_triton`` switched off as the op itself does, so they pay the same host
cost as ``kp.matmul``.

It prints one table and writes every number to ``--out`` as JSON. FLOPs are
``2*M*N*K`` per product (three products for forward + backward).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

#: (M, N, K) of the tuning problems: the big cubes, a short K, a tall M.
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 512), (65536, 1024, 1024)]
#: The same kinds of problem, small enough for the interpreter.
DRY_SHAPES = [(128, 128, 128), (256, 256, 32), (1024, 64, 64)]
#: Speed targets (ours / cuBLAS) the project set itself for the forward product.
FWD_TARGETS = {
    (4096, 4096, 4096): 1.0,
    (8192, 8192, 8192): 1.0,
    (8192, 8192, 512): 0.90,
    (65536, 1024, 1024): 0.90,
}
#: Target for forward + backward against torch, every shape.
FWDBWD_TARGET = 0.95


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU under TRITON_INTERPRET=1, tiny shapes, correctness only",
    )
    return parser.parse_args(argv)


def config_label(config) -> str:
    """``128x256x64 w8 s3`` plus ``split2`` / ``ws`` where set."""
    kw = config.kwargs
    label = (
        f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} w{config.num_warps} s{config.num_stages}"
    )
    if kw.get("EPILOGUE_SPLIT", 1) > 1:
        label += f" split{kw['EPILOGUE_SPLIT']}"
    if kw.get("WARP_SPECIALIZE"):
        label += " ws"
    return label


def config_dict(config) -> dict:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


class Tuner:
    """Times calls (or, in a dry run, only runs them) and collects the records."""

    def __init__(self, dry_run: bool) -> None:
        import torch

        self.dry_run = dry_run
        self.device = "cpu" if dry_run else "cuda"
        self.records: list[dict] = []
        torch.manual_seed(0)

    def median_ms(self, fn, grad_to_none=None) -> float | None:
        if self.dry_run:
            fn()
            return None
        import triton.testing

        return triton.testing.do_bench(fn, grad_to_none=grad_to_none, return_mode="median")

    def record(self, shape, dtype, impl, ms, *, products=1, **extra) -> dict:
        m, n, k = shape
        flops = 2 * m * n * k * products
        rec = {
            "shape": list(shape),
            "dtype": str(dtype).removeprefix("torch."),
            "impl": impl,
            "median_ms": ms,
            "tflops": None if ms is None else flops / ms / 1e9,
            **extra,
        }
        self.records.append(rec)
        return rec


def rel_error(out, ref) -> float:
    """``||out - ref|| / ||ref||`` on the device, in float32 (cheap at 8192^3)."""
    diff = (out.float() - ref).norm().item()
    return diff / max(ref.norm().item(), 1e-30)


def tune_forward(tuner: Tuner, shape, dtype) -> list[dict]:
    import torch
    from torch._library.triton import set_wrap_triton_enabled

    import kernel_portfolio as kp
    from kernel_portfolio.ops import matmul as mm

    m, n, k = shape
    a = torch.randn(m, k, device=tuner.device).to(dtype)
    b = torch.randn(k, n, device=tuner.device).to(dtype)
    ref = a.float() @ b.float()
    out = torch.empty(m, n, dtype=dtype, device=tuner.device)
    rows = [tuner.record(shape, dtype, "cublas", tuner.median_ms(lambda: torch.mm(a, b)))]
    for config in mm.TMA_CONFIGS:
        out.fill_(float("nan"))

        def call(config=config):
            with set_wrap_triton_enabled(False):
                mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", config=config)

        try:
            ms = tuner.median_ms(call)
            err, failure = rel_error(out, ref), None
        # A config that fails to compile or launch is a finding: record it, go on.
        except Exception as exc:
            ms, err, failure = None, None, f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(
            tuner.record(
                shape,
                dtype,
                f"tma {config_label(config)}",
                ms,
                config=config_dict(config),
                rel_error=err,
                error=failure,
            )
        )
    ms = tuner.median_ms(lambda: kp.matmul(a, b))
    chosen = None if tuner.dry_run else mm._matmul_tma_tuned.best_config
    rows.append(
        tuner.record(
            shape,
            dtype,
            "kp.matmul",
            ms,
            config=None if chosen is None else config_dict(chosen),
            chosen=None if chosen is None else config_label(chosen),
            rel_error=rel_error(kp.matmul(a, b), ref),
            target=FWD_TARGETS.get(shape),
        )
    )
    rows.append(
        tuner.record(shape, dtype, "cublas (again)", tuner.median_ms(lambda: torch.mm(a, b)))
    )
    return rows


def tune_fwdbwd(tuner: Tuner, shape, dtype) -> list[dict]:
    import torch

    import kernel_portfolio as kp

    m, n, k = shape
    a = torch.randn(m, k, device=tuner.device).to(dtype).requires_grad_()
    b = torch.randn(k, n, device=tuner.device).to(dtype).requires_grad_()
    grad = torch.randn(m, n, device=tuner.device).to(dtype)

    def step(fn):
        fn(a, b).backward(grad)

    rows = []
    for impl, fn in (("cublas fwd+bwd", torch.mm), ("kp.matmul fwd+bwd", kp.matmul)):
        ms = tuner.median_ms(lambda fn=fn: step(fn), grad_to_none=[a, b])
        target = FWDBWD_TARGET if impl.startswith("kp") else None
        rows.append(tuner.record(shape, dtype, impl, ms, products=3, target=target))
    a0, b0 = a.detach(), b.detach()
    for part, x, y in (("dA", grad, b0.mT), ("dB", a0.mT, grad)):
        for name, fn in (("cublas", torch.mm), ("kp.matmul", kp.matmul)):
            ms = tuner.median_ms(lambda fn=fn, x=x, y=y: fn(x, y))
            rows.append(tuner.record(shape, dtype, f"{name} {part}", ms))
    return rows


def add_ratios(rows: list[dict]) -> None:
    """Speed-up against cuBLAS (its time / ours).

    Forward rows against the mean of cuBLAS's two forward runs; forward +
    backward, ``dA`` and ``dB`` rows against cuBLAS's row of the same part.
    """
    fwd = [r["median_ms"] for r in rows if r["impl"] in ("cublas", "cublas (again)")]
    base_fwd = sum(fwd) / len(fwd) if None not in fwd else None
    other = {
        r["impl"].split()[1]: r["median_ms"]
        for r in rows
        if r["impl"].startswith("cublas ") and r["impl"] != "cublas (again)"
    }
    for r in rows:
        part = r["impl"].split()[-1]
        base = other.get(part, base_fwd)
        ok = base is not None and r["median_ms"] is not None
        r["vs_cublas"] = base / r["median_ms"] if ok else None


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'shape':>17} {'dtype':>8} {'impl':<32} {'ms':>8} {'TFLOP/s':>8} "
        f"{'/cuBLAS':>7} {'target':>6} {'rel err':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        impl = r["impl"] + (f" -> {r['chosen']}" if r.get("chosen") else "")
        note = f"  {r['error']}" if r.get("error") else ""
        print(
            f"{shape:>17} {r['dtype']:>8} {impl:<32} {fmt(r['median_ms'], '.4f'):>8} "
            f"{fmt(r['tflops'], '.0f'):>8} {fmt(r.get('vs_cublas'), '.3f'):>7} "
            f"{fmt(r.get('target'), '.2f'):>6} {fmt(r.get('rel_error'), '.1e'):>8}{note}"
        )


def environment(dry_run: bool) -> dict:
    import torch
    import triton

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    if not dry_run:
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_name=props.name, sm_count=props.multi_processor_count)
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    from kernel_portfolio.contracts import interpreter_enabled

    if args.dry_run != interpreter_enabled():
        print(
            "gemm_tune: --dry-run runs on the CPU and needs TRITON_INTERPRET=1; "
            "a GPU run needs it unset",
            file=sys.stderr,
        )
        return 2
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gemm_tune: no CUDA GPU (use --dry-run for a CPU check)", file=sys.stderr)
        return 2

    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.perf_counter()
    tuner = Tuner(args.dry_run)
    for shape in DRY_SHAPES if args.dry_run else SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            rows = tune_forward(tuner, shape, dtype) + tune_fwdbwd(tuner, shape, dtype)
            add_ratios(rows)
            print(
                f"{'x'.join(map(str, shape))} {dtype}: {time.perf_counter() - t0:.0f} s", flush=True
            )
    print_table(tuner.records)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "command": " ".join(["python", "scripts/gemm_tune.py", *argv]),
        "started_utc": started,
        "seconds": round(time.perf_counter() - t0, 1),
        "dry_run": args.dry_run,
        "timer": "triton.testing.do_bench, L2 cleared before each call, median",
        "env": environment(args.dry_run),
        "records": tuner.records,
    }
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
