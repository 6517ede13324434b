"""The plan of a run and its time estimate (``kp bench --dry-run``; no GPU needed).

The estimate is a budget, not a measurement: it adds up fixed costs per
process, per case and per implementation (compilation, checks, warm-up) and
the timed calls (visits x samples x the call's expected time). The assumed
costs are the constants below; each says where it comes from.

Calibration: the first H200 run of the default suite's forward, events-timed
cases (58 cases: ours, torch, Liger and cuBLAS; no torch.compile) took 49 s of
cases against 112 s estimated (its raw log is archived as
``results/archive/h200/default--mode-fwd-timer-events-...-20261130T163516Z.log``).
Row and elementwise cases took 0.1-0.9 s each (estimated 1.0-1.5 s), the
first Triton case and the first Liger case about 6.5 s each, 16-bit GEMMs
1.2-1.7 s (estimated 2-20 s: that run's Triton cache already held the GEMM
kernels its GPU tests had compiled, so the cold-cache GEMM figures below are
kept) and the float32 GEMM 9.0 s (estimated 8.3 s). The case, JIT and
first-use constants below follow that run; the torch.compile, backward and
CUDA-graph constants are not yet calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import triton

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.bench.suites import Case, Suite

#: Python, torch, triton and Liger imports, CUDA context, copy bandwidth, 0.5 s warm-up.
PROCESS_S = 20.0
#: First Triton launch of the run (driver, ptxas and launcher start-up): 6.5 s
#: for the first case of the calibration run against about 0.3 s for the next.
FIRST_TRITON_S = 6.0
#: First Liger-Kernel case (its import and first compile): 6.4 s in that run.
FIRST_LIGER_S = 6.0
#: torch.compile's first graph starts inductor's compile workers (one-off).
COMPILE_FIRST_S = 20.0
#: torch.compile of one graph (dynamo + inductor + Triton codegen). On this
#: project's 2-core CPU machine one graph of softmax/RMSNorm compiled in
#: 0.7-1.8 s (C++ backend, after a 17 s first compile); Triton code generation
#: on the GPU host is assumed about twice that.
COMPILE_S = {"fwd": 2.0, "fwdbwd": 4.0}
#: Triton compile of the kernels of one specialisation of a row/elementwise
#: operator (forward: one kernel; forward + backward: two or three).
JIT_S = {"fwd": 0.4, "fwdbwd": 1.2}
#: Our GEMM compiles its autotuning configs once per dtype and operand layout
#: (the forward reads A and B as they are; the backward adds A^T and B^T):
#: 9 TMA configs at about 2 s each for 16-bit dtypes, 5 pointer configs at
#: about 1.2 s for float32 (ops/matmul.py's config lists).
GEMM_COMPILE_S = {"float16": 18.0, "bfloat16": 18.0, "float32": 6.0}
GEMM_LAYOUTS = {"fwd": ("nn",), "fwdbwd": ("nn", "nt", "tn")}
#: Our GEMM then times every config once per new shape (tuning key) and layout.
GEMM_TUNE_S = {"fwd": 1.5, "fwdbwd": 4.5}
#: Widest block Liger-Kernel 0.8 launches (``calculate_settings``); wider rows raise.
LIGER_MAX_BLOCK = 65536
#: SMs of the H200 the estimate is for (row plans depend on it).
H200_SMS = 132
#: Per case: inputs, float64 references (CPU rows + device gradients), dynamo reset
#: (cases with nothing to compile took 0.1-0.2 s in the calibration run).
CASE_S = 0.1
#: Per implementation: poisoning, check call, warm-up, peak-memory call.
IMPL_S = 0.05
#: Per CUDA-graph capture.
CAPTURE_S = 0.2
#: Per implementation of a CUDA-graph case: the host-cost loops
#: (:func:`~kernel_portfolio.bench.timing.host_cost`: a probe, then the repeats).
HOST_COST_S = timing.HOST_REPEATS * timing.HOST_LOOP_MS / 1e3 + 0.02
#: Expected rates on the H200 (about 75% of its copy bandwidth; half of bf16
#: cuBLAS; float32 GEMM without tf32).
BYTES_PER_S = 3.0e12
FLOPS_PER_S = {"float16": 6e14, "bfloat16": 6e14, "float32": 4e13}
#: Host cost of one call (the floor when the GPU work is shorter): eager
#: launches under events, graph replay per captured call.
HOST_S = {("events", "fwd"): 12e-6, ("events", "fwdbwd"): 80e-6,
          ("cuda_graph", "fwd"): 3e-6, ("cuda_graph", "fwdbwd"): 10e-6}  # fmt: skip
#: Cold-L2 flush before each event sample (2 x 60 MiB written) plus event overhead.
FLUSH_S = 50e-6
#: The time a full default run must stay under on one H200.
BUDGET_S = 8 * 60


@dataclass
class Estimate:
    """Estimated seconds of a run, by kind of cost."""

    fixed: float = 0.0
    compile: float = 0.0
    jit: float = 0.0
    checks: float = 0.0
    timed: float = 0.0
    per_case: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """All of it."""
        return self.fixed + self.compile + self.jit + self.checks + self.timed


def call_seconds(case: Case) -> float:
    """Expected time of one call: the larger of the device work and the host's launch cost."""
    device = case.bytes / BYTES_PER_S
    if case.flops is not None:
        device = max(device, case.flops / FLOPS_PER_S[case.dtype])
    return max(device, HOST_S[(case.timer, case.mode)])


def _jit_key(case: Case, impl: str) -> tuple | None:
    """Cases with the same key reuse one compiled specialisation of ``impl``."""
    if impl == "liger":  # Liger specialises on the block (next power of two) and n % 16
        block = triton.next_power_of_2(case.shape[-1])
        if block > LIGER_MAX_BLOCK:
            return None  # Liger raises before compiling anything
        return (impl, case.op, case.mode, case.dtype, block, case.shape[-1] % 16)
    if impl != "ours" or case.op == "matmul":
        return None
    if not case.spec.row_op:
        return (impl, case.op, case.mode, case.dtype)
    rows, width = case.shape
    plan = plans.choose(rows, width, elem_bytes=case.elem_bytes, sm_count=H200_SMS)
    return (impl, case.op, case.mode, case.dtype, plan, width % 16)


def estimate(suite: Suite, cases: list[Case], *, visits: int, cache: str = "cold") -> Estimate:
    """Estimate the run time of ``cases`` with the suite's sample counts."""
    est = Estimate(fixed=PROCESS_S + (FIRST_TRITON_S if cases else 0.0))
    if any("liger" in c.impls for c in cases):
        est.fixed += FIRST_LIGER_S
    if any("compile" in c.impls for c in cases):
        est.fixed += COMPILE_FIRST_S
    samples = visits * suite.samples
    compiled: set[tuple] = set()
    for case in cases:
        call = call_seconds(case)
        compile_s = COMPILE_S[case.mode] if "compile" in case.impls else 0.0
        jit_s = 0.0
        if "ours" in case.impls and case.op == "matmul":
            jit_s += GEMM_TUNE_S[case.mode]
            for layout in GEMM_LAYOUTS[case.mode]:
                if ("gemm", case.dtype, layout) not in compiled:
                    compiled.add(("gemm", case.dtype, layout))
                    jit_s += GEMM_COMPILE_S[case.dtype]
        for impl in case.impls:
            key = _jit_key(case, impl)
            if key is not None and key not in compiled:
                compiled.add(key)
                jit_s += JIT_S[case.mode]
        n = len(case.impls)
        checks = CASE_S + n * (IMPL_S + 6 * call)  # first call, check, 3 warm-up, peak memory
        if case.timer == "cuda_graph":
            timed = n * (CAPTURE_S + samples * suite.graph_calls * call + HOST_COST_S)
        else:
            flush = FLUSH_S if cache == "cold" else 0.0
            lead = timing.LEAD_HOST_MULTIPLE * HOST_S[(case.timer, case.mode)]
            timed = n * samples * (call + flush + lead)
        timed += 0.05  # busy period before the case's timing
        est.compile += compile_s
        est.jit += jit_s
        est.checks += checks
        est.timed += timed
        est.per_case[case.id] = compile_s + jit_s + checks + timed
    return est


def plan_text(suite: Suite, cases: list[Case], *, visits: int, cache: str = "cold") -> str:
    """What ``kp bench --dry-run`` prints: every case, its implementations, and the estimate."""
    est = estimate(suite, cases, visits=visits, cache=cache)
    width = max(len(c.id) for c in cases)
    lines = [f"suite {suite.name}: {suite.description}", ""]
    lines.append(f"{'case':<{width}}  {'timer':<10}  {'est s':>6}  implementations")
    for case in cases:
        lines.append(
            f"{case.id:<{width}}  {case.timer:<10}  {est.per_case[case.id]:6.1f}  "
            f"{', '.join(case.impls)}"
        )
    n_impl = sum(len(c.impls) for c in cases)
    n_compile = sum("compile" in c.impls for c in cases)
    lines += [
        "",
        f"{len(cases)} cases, {n_impl} implementation runs ({n_compile} torch.compile graphs), "
        f"{visits} visits x {suite.samples} samples each (cuda_graph: x {suite.graph_calls} "
        f"calls per replay), cache {cache}",
        f"estimated time: {est.total / 60:.1f} min = fixed {est.fixed:.0f} s + torch.compile "
        f"{est.compile:.0f} s + Triton JIT/autotune {est.jit:.0f} s + checks and warm-up "
        f"{est.checks:.0f} s + timed calls {est.timed:.0f} s",
    ]
    if suite.notes:
        lines.append(f"notes: {suite.notes}")
    if suite.name == "default":
        verdict = "within" if est.total <= BUDGET_S else "OVER"
        lines.append(f"budget: {BUDGET_S / 60:.0f} min on one H200 ({verdict} budget)")
    return "\n".join(lines)
