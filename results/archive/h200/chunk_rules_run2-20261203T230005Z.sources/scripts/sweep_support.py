"""What every sweep script shares: the device, its timer, the run's provenance and the save.

A sweep runs on the GPU (CUDA events, L2 flushed before each timed call, the
GPU warmed up first, copy bandwidth measured in the same run) or, with
``--dry-run``, on the CPU under the Triton interpreter with tiny sizes, to test
its plumbing; a dry run's result says in its GPU name that it is not a
measurement. Either way the result is assembled by
:func:`kernel_portfolio.bench.records.build_result` and written atomically by
:func:`kernel_portfolio.results.commit_run`, with the console log beside it.
"""

from __future__ import annotations

import datetime as dt
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Files every sweep's numbers depend on besides its own script and kernels.
SUPPORT_SOURCES = (
    "scripts/sweep_support.py",
    "src/kernel_portfolio/bench/timing.py",
    "src/kernel_portfolio/bench/records.py",
)
#: Warm-up at the start of a GPU run (METHOD: idle clocks distort first samples).
RUN_WARMUP_MS = 500.0
COPY_SAMPLES = 20


def utc_now() -> str:
    """The current UTC time as the schema writes it."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Counts:
    """A case's compulsory bytes and FLOPs, as ``records.impl_record`` reads them."""

    bytes: int | None
    flops: int | None


@dataclass
class Run:
    """One sweep run: the device, its environment, and the console log.

    Attributes:
        dry_run: CPU under the Triton interpreter instead of the GPU.
        sm_count: SMs of the GPU (the H200's 132 in a dry run, as ``plans`` assumes).
        env: The result's ``env`` block.
        gpu_slug: Folder name of the GPU (``dry-run`` in a dry run).
        copy: The result's ``copy_bandwidth`` block.
        warmup_ms: Time the GPU was kept busy before measuring.
        lines: Everything :meth:`log` printed.
    """

    dry_run: bool
    sm_count: int
    env: dict
    gpu_slug: str
    copy: dict
    warmup_ms: float
    started: str
    props: object = None
    state_before: dict | None = None
    flusher: Callable[[], None] | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        """The torch device of the run's tensors."""
        return "cpu" if self.dry_run else "cuda"

    def log(self, text: str) -> None:
        """Print a line and keep it for the log file."""
        print(text, flush=True)
        self.lines.append(text)

    def sync(self) -> None:
        """Wait for the GPU (nothing to wait for in a dry run)."""
        if not self.dry_run:
            import torch

            torch.cuda.synchronize()

    def busy(self, ms: float) -> None:
        """Keep the GPU busy for ``ms`` so its clocks are up before timing."""
        if not self.dry_run:
            from kernel_portfolio.bench import timing

            timing.busy(ms)

    def time(self, call: Callable[[], object], samples: int, *, cold: bool) -> list[float]:
        """Milliseconds per call: CUDA events, with the L2 overwritten first when ``cold``.

        A dry run reads the host clock instead: its numbers time the interpreter.
        """
        if self.dry_run:
            out = []
            for _ in range(samples):
                start = time.perf_counter()
                call()
                out.append((time.perf_counter() - start) * 1e3)
            return out
        from kernel_portfolio.bench import timing

        return timing.time_events(call, samples, flush=self.flusher if cold else None)

    def gpu_state(self) -> dict:
        """The result's ``gpu_state`` block (``before`` was read when the run started)."""
        if self.dry_run:
            return {"before": self.state_before, "after": self.state_before, "busy_at_start": False}
        from kernel_portfolio.bench import env as bench_env

        busy = (self.state_before["utilization_pct"] or 0) > bench_env.BUSY_UTIL_PCT
        after = bench_env.gpu_state(self.props)
        return {"before": self.state_before, "after": after, "busy_at_start": busy}

    def save(
        self,
        *,
        suite: str,
        command: str,
        sources: list[str],
        timing: dict,
        cases: list[dict],
        out_dir: str | Path,
    ) -> Path:
        """Assemble the result, write ``<out_dir>/<suite>.json`` and ``.log`` atomically.

        Args:
            suite: Suite name, also the file stem.
            command: The exact command line.
            sources: Repo-relative files the numbers depend on (hashed into the result).
            timing: The result's ``timing`` block.
            cases: The case records.
            out_dir: Results folder, e.g. ``results/h200``.

        Returns:
            The results file written.
        """
        from kernel_portfolio.bench.records import build_result
        from kernel_portfolio.results import commit_run, git_state, source_hashes

        data = build_result(
            suite=suite,
            gpu_slug=self.gpu_slug,
            command=command,
            started_utc=self.started,
            finished_utc=utc_now(),
            git=git_state(ROOT),
            sources=source_hashes(ROOT, [*sources, *SUPPORT_SOURCES]),
            env=self.env,
            gpu_state=self.gpu_state(),
            copy_bandwidth=self.copy,
            timing={"warmup_ms": round(self.warmup_ms, 1), **timing},
            cases=cases,
            log=f"{suite}.log",
        )
        self.log(f"writing {Path(out_dir) / suite}.json and .log")
        done = commit_run(data, out_dir, suite, "\n".join(self.lines) + "\n", ROOT)
        for note in done.notes:
            print(note)
        return done.path


def start_run(dry_run: bool, command: str) -> Run:
    """Check the mode, capture the environment, warm the GPU up and measure the copy bandwidth.

    Raises:
        kernel_portfolio.cli.UserError: ``--dry-run`` without ``TRITON_INTERPRET=1``,
            a GPU run with it, or no GPU.
    """
    import torch

    from kernel_portfolio.bench.records import copy_record
    from kernel_portfolio.cli import UserError
    from kernel_portfolio.contracts import interpreter_enabled
    from kernel_portfolio.plans import CPU_SM_COUNT

    if dry_run and not interpreter_enabled():
        raise UserError("--dry-run runs the kernels on the CPU: set TRITON_INTERPRET=1 first")
    if not dry_run and interpreter_enabled():
        raise UserError("TRITON_INTERPRET=1 is set: a measurement needs the GPU (or --dry-run)")
    started = utc_now()
    if dry_run:
        state = dict.fromkeys(("utilization_pct", "sm_clock_mhz", "mem_clock_mhz", "temperature_c"))
        env = {
            "gpu_name": "CPU under TRITON_INTERPRET=1 (dry run: not a measurement)",
            "sm_count": CPU_SM_COUNT,
            "l2_bytes": None,
            "memory_clock_mhz": None,
            "driver": None,
            "cuda": None,
            "torch": torch.__version__,
            "triton": None,
            "python": platform.python_version(),
            "platform": platform.platform(),
        }
        run = Run(True, CPU_SM_COUNT, env, "dry-run", {}, 0.0, started, state_before=state)
        src = torch.randn(1 << 20, dtype=torch.float16)
        dst = torch.empty_like(src)
        run.copy = copy_record(4 << 20, run.time(lambda: dst.copy_(src), 5, cold=False))
    else:
        from kernel_portfolio.bench import env as bench_env
        from kernel_portfolio.bench import timing

        props = bench_env.require_gpu()
        env = bench_env.capture_env(props)
        run = Run(
            False,
            props.multi_processor_count,
            env,
            bench_env.gpu_slug(props.name),
            {},
            0.0,
            started,
            props=props,
            state_before=bench_env.gpu_state(props),
        )
        run.warmup_ms = timing.busy(RUN_WARMUP_MS)
        run.copy = copy_record(*timing.copy_bandwidth(COPY_SAMPLES))
        run.flusher = timing.L2Flusher(env["l2_bytes"])
    run.log(f"$ {command}")
    run.log(f"{run.env['gpu_name']}: {run.sm_count} SMs, copy {run.copy['gbps']:.0f} GB/s")
    return run
