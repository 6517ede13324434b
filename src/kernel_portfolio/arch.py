"""Ahead-of-time compile probes for NVIDIA GPU targets; no GPU needed.

Triton compiles for any target it knows without a device: ``triton.compile``
takes a ``GPUTarget``. This module compiles two small probe kernels for a
compute capability and reads what came out:

* the ``.target`` directive of the PTX (the architecture string Triton chose),
* how many instructions of each family in :data:`FAMILIES` the PTX holds,
* what the ``ptxas`` bundled in the triton wheel says about that PTX when its
  ``.target`` is rewritten to another architecture (:func:`run_ptxas`),
* Triton's own rule for the architecture string, read from the installed
  source (:func:`arch_rule`).

It shows what the compiler emits, not whether a kernel runs on hardware.
The sm_120a case study and ``scripts/triton_release_matrix.py`` are built on
it, and ``kp arch`` prints the same tables from the command line.

Only the standard library and triton are imported, and the probes cope with
every Triton release from 3.2 on, so the release matrix can import this module
in a scratch environment that holds nothing but one triton wheel. Old releases
abort the whole process on targets they do not know (a C++ assertion, an LLVM
error), so :func:`probe` can run each compile in a child process
(``isolate=True``) and record how it died.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
import triton.language as tl

from kernel_portfolio.results.schema import COMMIT

#: Compute capabilities probed by default: Ampere, Hopper, datacenter Blackwell,
#: consumer Blackwell (RTX 50xx) and DGX Spark's GB10.
CAPABILITIES = (80, 90, 100, 120, 121)

#: Instruction families counted in the PTX, each matched as an opcode prefix.
#: ``tcgen05``: Blackwell tensor-memory MMA (sm_100a); ``wgmma``: Hopper warpgroup
#: MMA (sm_90a); ``mma.sync``: warp-level MMA (sm_80 on); ``tensormap.replace``:
#: editing a TMA descriptor on the device; ``cp.async.bulk.tensor``: a TMA copy.
FAMILIES = ("tcgen05", "wgmma", "mma.sync", "tensormap.replace", "cp.async.bulk.tensor")

#: The ``ptxas`` runs shown by the case study and the release matrix:
#: (probe kernel, capability it was compiled for, ``.target`` it is assembled for).
#: The first two ask whether the suffix matters for device-side descriptors; the
#: third whether ``sm_120a`` lets through the tensor-memory code built for sm_100a.
PTXAS_CHECKS = (
    ("descriptor", 120, "sm_120a"),
    ("descriptor", 120, "sm_120"),
    ("dot", 100, "sm_120a"),
)

_BLOCK = 64
_SRC_ROOT = Path(__file__).resolve().parents[2]
_TRITON_ROOT = Path(triton.__file__).resolve().parents[1]
# Triton 3.3 names the device-side descriptor constructor with an
# ``_experimental_`` prefix; 3.4 made it public; 3.2 has neither.
_make_descriptor = getattr(tl, "make_tensor_descriptor", None) or getattr(
    tl, "_experimental_make_tensor_descriptor", None
)


def dot_probe(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    """C = A @ B for one BLOCK x BLOCK float16 tile: ``tl.dot`` becomes the
    target's matrix instruction (``mma.sync``, ``wgmma`` or ``tcgen05``)."""
    offs = tl.arange(0, BLOCK)
    tile = offs[:, None] * BLOCK + offs[None, :]
    c = tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile))
    tl.store(c_ptr + tile, c)


def descriptor_probe(x_ptr, y_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = 2 * x through tensor descriptors built on the device: on sm_90 and
    later Triton fills a TMA descriptor in memory (``tensormap.replace``) and
    copies through it (``cp.async.bulk.tensor``)."""
    x_desc = _make_descriptor(
        x_ptr, shape=[n_rows, n_cols], strides=[n_cols, 1], block_shape=[BLOCK_M, BLOCK_N]
    )
    y_desc = _make_descriptor(
        y_ptr, shape=[n_rows, n_cols], strides=[n_cols, 1], block_shape=[BLOCK_M, BLOCK_N]
    )
    row = tl.program_id(0) * BLOCK_M
    y_desc.store([row, 0], x_desc.load([row, 0]) * 2)


# kernel name -> (function, signature, constexpr values)
_KERNELS = {
    "dot": (
        dot_probe,
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "BLOCK": "constexpr"},
        {"BLOCK": _BLOCK},
    ),
    "descriptor": (
        descriptor_probe,
        {
            "x_ptr": "*fp16",
            "y_ptr": "*fp16",
            "n_rows": "i32",
            "n_cols": "i32",
            "BLOCK_M": "constexpr",
            "BLOCK_N": "constexpr",
        },
        {"BLOCK_M": _BLOCK, "BLOCK_N": _BLOCK},
    ),
}

#: Probe kernel names, in display order.
KERNELS = tuple(_KERNELS)

_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_GUARD = re.compile(r"^@!?%\w+\s+")
_TARGET = re.compile(r"^(\s*\.target\s+)(sm_\w+)", re.MULTILINE)
_GPU_NAME = re.compile(r"sm_(\d+)[af]?")
_RELEASE = re.compile(r"release (\d+\.\d+), V(\S+)")
# Keep failure texts readable in tables and JSON: compiler diagnostics can carry
# a whole IR dump, and some repeat one line per offending instruction.
_MAX_ERROR_LINES = 40


def count_instructions(ptx: str) -> dict[str, int]:
    """Count the PTX instructions of each family in :data:`FAMILIES`.

    Comments are ignored; a predicate guard (``@%p1``) is skipped; an
    instruction belongs to a family when its opcode is the family name or
    starts with it followed by a dot (``wgmma.mma_async`` is ``wgmma``, not
    ``mma.sync``).

    Args:
        ptx: PTX assembly text.

    Returns:
        ``{family: count}`` for every family, zeros included.

    Raises:
        TypeError: ``ptx`` is not a string.
    """
    if not isinstance(ptx, str):
        raise TypeError(f"ptx must be a str, got {type(ptx).__name__}")
    counts = dict.fromkeys(FAMILIES, 0)
    for statement in re.split(r"[;{}\n]", _COMMENTS.sub("", ptx)):
        words = _GUARD.sub("", statement.strip()).split(maxsplit=1)
        if not words:
            continue
        for family in FAMILIES:
            if words[0] == family or words[0].startswith(family + "."):
                counts[family] += 1
    return counts


def ptx_target(ptx: str) -> str | None:
    """The architecture named by the PTX's ``.target`` directive (``sm_120a``), or None."""
    if not isinstance(ptx, str):
        raise TypeError(f"ptx must be a str, got {type(ptx).__name__}")
    match = _TARGET.search(ptx)
    return match.group(2) if match else None


def retarget(ptx: str, gpu_name: str) -> str:
    """Return ``ptx`` with its ``.target`` architecture replaced by ``gpu_name``.

    Raises:
        ValueError: ``gpu_name`` is not of the form ``sm_<digits>[a|f]``, or the
            PTX has no ``.target`` directive.
    """
    _capability_of(gpu_name)
    text, n = _TARGET.subn(lambda m: m.group(1) + gpu_name, ptx, count=1)
    if n != 1:
        raise ValueError("ptx has no .target directive to rewrite")
    return text


@dataclasses.dataclass(frozen=True)
class CompileProbe:
    """One ahead-of-time compile of a probe kernel for one capability.

    Attributes:
        kernel: Probe kernel name (one of :data:`KERNELS`).
        capability: Compute capability compiled for (``120`` for sm_120).
        target: The ``.target`` architecture of the PTX, or None without PTX.
        counts: ``{family: count}`` over the PTX, or None without PTX.
        compiled: Whether the whole pipeline, ``ptxas`` included, succeeded.
        error: The failure text when ``compiled`` is false.
        messages: What the compiler printed to stderr (child processes only).
        ptx: The PTX text, when Triton got that far (kept out of ``repr``).
    """

    kernel: str
    capability: int
    target: str | None
    counts: dict[str, int] | None
    compiled: bool
    error: str | None = None
    messages: str | None = None
    ptx: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_ptx(cls, kernel, capability, ptx, error=None, messages=None) -> CompileProbe:
        """Build a probe from the PTX (None when none was produced) and the failure text."""
        return cls(
            kernel=kernel,
            capability=capability,
            target=None if ptx is None else ptx_target(ptx),
            counts=None if ptx is None else count_instructions(ptx),
            compiled=error is None,
            error=error,
            messages=messages,
            ptx=ptx,
        )

    def to_dict(self, *, with_ptx: bool = False) -> dict:
        """The probe as a JSON-ready dict; the PTX only when ``with_ptx``."""
        data = dataclasses.asdict(self)
        if not with_ptx:
            del data["ptx"]
        return data


def _check_kernel(kernel: object) -> str:
    if kernel not in _KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
    return kernel


def _check_capability(capability: object) -> int:
    if isinstance(capability, bool) or not isinstance(capability, int):
        raise TypeError(f"capability must be an int such as 120, got {type(capability).__name__}")
    if capability <= 0:
        raise ValueError(f"capability must be positive (major * 10 + minor), got {capability}")
    return capability


def _capability_of(gpu_name: object) -> int:
    match = _GPU_NAME.fullmatch(gpu_name) if isinstance(gpu_name, str) else None
    if match is None:
        raise ValueError(f"gpu_name must look like sm_120 or sm_120a, got {gpu_name!r}")
    return int(match.group(1))


def _trim(text: str) -> str:
    """Keep the head and the tail (where a fatal error usually is) of a long text."""
    lines = text.strip().splitlines()
    if len(lines) > _MAX_ERROR_LINES:
        half = _MAX_ERROR_LINES // 2
        cut = len(lines) - 2 * half
        lines = [*lines[:half], f"[... {cut} lines left out ...]", *lines[-half:]]
    return "\n".join(lines)


@contextlib.contextmanager
def _fresh_cache():
    """Point Triton at an empty cache so every probe really compiles."""
    old = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="kp-arch-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            yield Path(cache)
        finally:
            if old is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = old


def compile_probe(kernel: str, capability: int) -> CompileProbe:
    """Compile one probe kernel ahead of time for ``capability``, in this process.

    Uses an empty Triton cache, so the compile is real. When a later stage
    fails (``ptxas`` refusing the PTX), the PTX Triton had already written to
    the cache is still read and counted. Some Triton releases abort the process
    on targets they do not know; use :func:`probe` with ``isolate=True`` there.

    Args:
        kernel: ``"dot"`` or ``"descriptor"``.
        capability: Compute capability, ``major * 10 + minor`` (``120``).

    Returns:
        The :class:`CompileProbe`; a compile failure is recorded, not raised.

    Raises:
        ValueError: unknown ``kernel`` or a non-positive ``capability``.
        TypeError: ``capability`` is not an int.
    """
    fn, signature, constexprs = _KERNELS[_check_kernel(kernel)]
    _check_capability(capability)
    if fn is descriptor_probe and _make_descriptor is None:
        return CompileProbe.from_ptx(
            kernel,
            capability,
            None,
            f"triton {triton.__version__} has no device-side tensor descriptor "
            "(tl.make_tensor_descriptor)",
        )
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    # JITFunction directly, not @triton.jit: under TRITON_INTERPRET=1 the
    # decorator returns an interpreter object that cannot be compiled.
    source = ASTSource(JITFunction(fn), signature, constexprs)
    with _fresh_cache() as cache, contextlib.redirect_stdout(io.StringIO()):
        try:
            compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32))
            return CompileProbe.from_ptx(kernel, capability, compiled.asm["ptx"])
        # Any compiler failure is the finding itself (CompilationError,
        # PTXASError, RuntimeError, AssertionError differ by release): record it.
        except Exception as exc:
            written = sorted(cache.rglob("*.ptx"))
            ptx = written[0].read_text() if written else None
            return CompileProbe.from_ptx(
                kernel, capability, ptx, _trim(f"{type(exc).__name__}: {exc}")
            )


def _write_probe(kernel: str, capability: str, path: str) -> None:
    """Child-process entry of :func:`probe` with ``isolate=True``."""
    result = compile_probe(kernel, int(capability))
    Path(path).write_text(json.dumps(result.to_dict(with_ptx=True)))


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def _probe_in_child(kernel: str, capability: int) -> CompileProbe:
    _check_kernel(kernel)
    _check_capability(capability)
    with tempfile.TemporaryDirectory(prefix="kp-arch-") as tmp:
        out = Path(tmp, "probe.json")
        code = "import sys, kernel_portfolio.arch as arch; arch._write_probe(*sys.argv[1:])"
        proc = subprocess.run(
            [sys.executable, "-c", code, kernel, str(capability), str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        # Diagnostics name files by absolute path; keep them relative to the
        # repository (this module) or to site-packages (triton's own files).
        stderr = proc.stderr.replace(f"{_SRC_ROOT}{os.sep}", "")
        messages = _trim(stderr.replace(f"{_TRITON_ROOT}{os.sep}", "")) or None
        if proc.returncode == 0 and out.exists():
            data = json.loads(out.read_text())
            return dataclasses.replace(CompileProbe(**data), messages=messages)
    error = f"compiler process died ({_describe_exit(proc.returncode)})"
    return CompileProbe.from_ptx(kernel, capability, None, error, messages)


def probe(
    capabilities=CAPABILITIES, kernels=KERNELS, *, isolate: bool = False
) -> list[CompileProbe]:
    """Compile every probe kernel for every capability.

    Args:
        capabilities: Compute capabilities to compile for.
        kernels: Probe kernel names (see :data:`KERNELS`).
        isolate: Compile each in a child Python process, so that a release
            that aborts on an unknown target costs one row, not the run; the
            child's stderr is kept in ``messages``.

    Returns:
        One :class:`CompileProbe` per (kernel, capability), kernels outermost.
    """
    run = _probe_in_child if isolate else compile_probe
    return [run(kernel, capability) for kernel in kernels for capability in capabilities]


def _nvidia_compiler():
    from triton.backends.nvidia import compiler

    return compiler


def rule_arch(capability: int) -> str | None:
    """The architecture string Triton's own ``sm_arch_from_capability`` gives.

    Returns:
        For example ``"sm_120a"``, or None for releases without that function
        (Triton 3.2 builds the string inline; see :func:`arch_rule`).
    """
    _check_capability(capability)
    rule = getattr(_nvidia_compiler(), "sm_arch_from_capability", None)
    return None if rule is None else rule(capability)


@dataclasses.dataclass(frozen=True)
class RuleSource:
    """Lines of the installed Triton source that build the architecture string.

    Attributes:
        path: File path relative to the directory holding the ``triton`` package.
        function: ``"sm_arch_from_capability"``, or None when the rule is inline.
        lines: ``(line number, text)`` pairs, 1-based.
    """

    path: str
    function: str | None
    lines: tuple[tuple[int, str], ...]


def arch_rule() -> RuleSource:
    """Read Triton's rule for the architecture suffix from the installed package.

    Returns the source of ``sm_arch_from_capability`` in the CUDA backend's
    ``compiler.py``; releases without that function (3.2) get the lines that
    assign the LLVM processor name or the ptxas suffix (``proc =``, ``suffix =``).
    """
    compiler = _nvidia_compiler()
    path = Path(inspect.getsourcefile(compiler))
    shown = path.resolve().relative_to(_TRITON_ROOT).as_posix()
    rule = getattr(compiler, "sm_arch_from_capability", None)
    if rule is not None:
        body, first = inspect.getsourcelines(rule)
        lines = tuple((first + i, text.rstrip("\n")) for i, text in enumerate(body))
        return RuleSource(shown, rule.__name__, lines)
    assigns = re.compile(r"^\s*(proc|suffix)\s*=")
    numbered = enumerate(path.read_text().splitlines(), start=1)
    return RuleSource(shown, None, tuple((n, t) for n, t in numbered if assigns.search(t)))


def ptxas_for(capability: int) -> Path:
    """The ``ptxas`` binary Triton itself would run for ``capability``.

    Asks the CUDA backend (``get_ptxas``), so ``TRITON_PTXAS_PATH`` and the
    separate ``ptxas-blackwell`` that some wheels bundle are honoured.
    """
    _check_capability(capability)
    compiler = _nvidia_compiler()
    get_ptxas = getattr(compiler, "get_ptxas", None)
    if get_ptxas is None:  # 3.2: one ptxas for every target
        return Path(compiler._path_to_binary("ptxas")[0])
    # 3.4 and 3.5 take no argument; 3.3 returns (path, version), later a tool object
    tool = get_ptxas(capability) if inspect.signature(get_ptxas).parameters else get_ptxas()
    return Path(tool[0] if isinstance(tool, tuple) else tool.path)


def ptxas_version(path: str | os.PathLike) -> dict[str, str]:
    """``ptxas --version`` of one binary.

    Returns:
        ``{"release": "12.9", "version": "12.9.86", "line": <the full line>}``.

    Raises:
        ValueError: the output names no release.
    """
    out = subprocess.run(
        [os.fspath(path), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = _RELEASE.search(out)
    if match is None:
        raise ValueError(f"{path}: --version names no release: {out.strip()!r}")
    line = next(line for line in out.splitlines() if match.group(0) in line)
    return {"release": match.group(1), "version": match.group(2), "line": line.strip()}


def bundled_ptxas() -> dict[str, dict[str, str]]:
    """Every ``ptxas*`` binary shipped in the installed triton wheel, with its version."""
    bin_dir = Path(inspect.getsourcefile(_nvidia_compiler())).parent / "bin"
    return {p.name: ptxas_version(p) for p in sorted(bin_dir.glob("ptxas*")) if p.is_file()}


@dataclasses.dataclass(frozen=True)
class PtxasRun:
    """One ``ptxas`` run on a PTX file, with the output as captured.

    Attributes:
        ptxas: Binary name (``ptxas`` or ``ptxas-blackwell``).
        version: Its version (``12.9.86``).
        gpu_name: ``--gpu-name`` passed, equal to the PTX's ``.target``.
        returncode: Exit status; 0 when the PTX assembled.
        output: stdout and stderr together as printed (outer blank lines dropped).

    ``ptxas``, ``version`` and ``returncode`` are None for a check that had no
    PTX to assemble (see :func:`ptxas_checks`).
    """

    ptxas: str | None
    version: str | None
    gpu_name: str
    returncode: int | None
    output: str

    @property
    def ok(self) -> bool:
        """Whether ptxas accepted the PTX."""
        return self.returncode == 0


def run_ptxas(ptx: str, gpu_name: str, *, ptxas: str | os.PathLike | None = None) -> PtxasRun:
    """Assemble ``ptx`` for ``gpu_name`` with a ``ptxas`` from the triton wheel.

    The PTX's ``.target`` is rewritten to ``gpu_name`` first, so the directive
    and ``--gpu-name`` agree. The file is called ``probe.ptx``, so error lines
    read ``ptxas probe.ptx, line 62; error : ...``.

    Args:
        ptx: PTX text with a ``.target`` directive.
        gpu_name: Architecture such as ``"sm_120a"`` or ``"sm_120"``.
        ptxas: Binary to run; default: the one Triton uses for that capability
            (:func:`ptxas_for`).

    Returns:
        The :class:`PtxasRun`; a rejection is recorded, not raised.

    Raises:
        TypeError: ``ptx`` is not a string.
        ValueError: malformed ``gpu_name``, or no ``.target`` in ``ptx``.
    """
    if not isinstance(ptx, str):
        raise TypeError(f"ptx must be a str, got {type(ptx).__name__}")
    capability = _capability_of(gpu_name)
    text = retarget(ptx, gpu_name)
    binary = Path(ptxas) if ptxas is not None else ptxas_for(capability)
    with tempfile.TemporaryDirectory(prefix="kp-ptxas-") as tmp:
        Path(tmp, "probe.ptx").write_text(text)
        proc = subprocess.run(
            [os.fspath(binary), f"--gpu-name={gpu_name}", "probe.ptx", "-o", "probe.cubin"],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
    return PtxasRun(
        ptxas=binary.name,
        version=ptxas_version(binary)["version"],
        gpu_name=gpu_name,
        returncode=proc.returncode,
        output=proc.stdout.strip(),
    )


def ptxas_checks(probes: list[CompileProbe], checks=PTXAS_CHECKS) -> list[dict]:
    """Run the ``ptxas`` checks of :data:`PTXAS_CHECKS` on PTX from ``probes``.

    Returns:
        One dict per check: ``kernel``, ``from_capability``, ``gpu_name``,
        ``status`` (``"accepted"``, ``"rejected"`` or ``"skipped"`` when the
        probe produced no PTX), ``ptxas``, ``version``, ``returncode``, ``output``.
    """
    by_key = {(p.kernel, p.capability): p for p in probes}
    rows = []
    for kernel, capability, gpu_name in checks:
        row = {"kernel": kernel, "from_capability": capability}
        source = by_key.get((kernel, capability))
        if source is None or source.ptx is None:
            reason = "not probed" if source is None else source.error.splitlines()[0]
            skipped = PtxasRun(None, None, gpu_name, None, f"no PTX to assemble: {reason}")
            rows.append(row | dataclasses.asdict(skipped) | {"status": "skipped"})
        else:
            run = run_ptxas(source.ptx, gpu_name)
            status = "accepted" if run.ok else "rejected"
            rows.append(row | dataclasses.asdict(run) | {"status": status})
    return rows


def release_report(*, isolate: bool = True) -> dict:
    """Everything the release matrix records about the installed triton.

    Returns:
        A JSON-ready dict: ``triton`` (version), ``rule`` (:func:`arch_rule`),
        ``rule_arch`` (per capability), ``ptxas`` (bundled binaries and the one
        used per capability), ``probes`` (every :func:`probe`, without PTX) and
        ``ptxas_checks``.
    """
    probes = probe(isolate=isolate)
    return {
        "triton": triton.__version__,
        "rule": dataclasses.asdict(arch_rule()),
        "rule_arch": {str(c): rule_arch(c) for c in CAPABILITIES},
        "ptxas": {
            "bundled": bundled_ptxas(),
            "by_capability": {str(c): ptxas_for(c).name for c in CAPABILITIES},
        },
        "probes": [p.to_dict() for p in probes],
        "ptxas_checks": ptxas_checks(probes),
    }


#: Version of the release-matrix document (``results/triton-releases/matrix.json``).
MATRIX_SCHEMA_VERSION = 1
MATRIX_KIND = "triton_release_matrix"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHECK_STATUSES = ("accepted", "rejected", "skipped")


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{where}: {message}")


def _require_keys(obj: object, keys: tuple[str, ...], where: str) -> None:
    _require(isinstance(obj, dict), where, f"must be an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    _require(not missing, where, f"missing {', '.join(missing)}")


def _validate_probe(p: object, where: str) -> None:
    keys = ("kernel", "capability", "target", "counts", "compiled", "error", "messages")
    _require_keys(p, keys, where)
    _require(p["kernel"] in KERNELS, f"{where}.kernel", f"unknown kernel {p['kernel']!r}")
    _require(type(p["capability"]) is int, f"{where}.capability", "must be an int")
    _require(type(p["compiled"]) is bool, f"{where}.compiled", "must be true or false")
    _require(
        p["compiled"] == (p["error"] is None), f"{where}.error", "set exactly when not compiled"
    )
    counts = p["counts"]
    if counts is None:
        _require(p["target"] is None, f"{where}.target", "a target without PTX counts")
        return
    _require(
        isinstance(counts, dict) and list(counts) == list(FAMILIES),
        f"{where}.counts",
        f"must have exactly the families {', '.join(FAMILIES)} in order",
    )
    bad = [f for f, n in counts.items() if type(n) is not int or n < 0]
    _require(not bad, f"{where}.counts", f"not a count: {', '.join(bad)}")
    _require(isinstance(p["target"], str), f"{where}.target", "PTX counts without a target")


def _validate_release(r: object, where: str, capabilities: list[int]) -> None:
    _require_keys(r, ("version", "wheel", "status", "error"), where)
    wheel = r["wheel"]
    _require_keys(
        wheel, ("filename", "sha256", "index_sha256", "url", "size_bytes"), f"{where}.wheel"
    )
    _require(r["status"] in ("ok", "failed"), f"{where}.status", "must be ok or failed")
    if r["status"] == "failed":
        _require(isinstance(r["error"], str) and r["error"], f"{where}.error", "failure text")
        return
    _require(
        isinstance(wheel["sha256"], str) and _SHA256.fullmatch(wheel["sha256"]) is not None,
        f"{where}.wheel.sha256",
        "must be 64 lowercase hex digits",
    )
    _require(
        wheel["index_sha256"] in (None, wheel["sha256"]),
        f"{where}.wheel.index_sha256",
        "differs from the sha256 of the downloaded file",
    )
    keys = ("triton", "rule", "rule_arch", "ptxas", "probes", "ptxas_checks")
    _require_keys(r, keys, where)
    _require(r["triton"] == r["version"], f"{where}.triton", "installed version differs")
    _require_keys(r["rule"], ("path", "function", "lines"), f"{where}.rule")
    _require_keys(r["ptxas"], ("bundled", "by_capability"), f"{where}.ptxas")
    probes = r["probes"]
    _require(isinstance(probes, list), f"{where}.probes", "must be a list")
    for i, p in enumerate(probes):
        _validate_probe(p, f"{where}.probes[{i}]")
    grid = sorted((p["kernel"], p["capability"]) for p in probes)
    expected = sorted((k, c) for k in KERNELS for c in capabilities)
    _require(grid == expected, f"{where}.probes", "must hold every kernel x capability once")
    for i, c in enumerate(r["ptxas_checks"]):
        at = f"{where}.ptxas_checks[{i}]"
        _require_keys(c, ("kernel", "from_capability", "gpu_name", "status", "output"), at)
        _require(c["status"] in _CHECK_STATUSES, f"{at}.status", f"not one of {_CHECK_STATUSES}")


def validate_release_matrix(data: object, *, name: str = "matrix") -> dict:
    """Check a Triton release-matrix document and return it unchanged.

    Schema version 1, written by ``scripts/triton_release_matrix.py``; it holds
    no timings. Top level: ``schema_version``, ``kind``
    (``"triton_release_matrix"``), ``command``, ``started_utc``,
    ``finished_utc``, ``git`` (``commit``, the full 40-hex one, and ``dirty``),
    ``sources`` (repo path to SHA-256 of LF-normalised bytes), ``host``,
    ``capabilities``, ``kernels``, ``families``, ``log`` (file name of the raw
    log beside it) and
    ``releases``. Each release: ``version``; ``wheel`` (``filename``,
    ``sha256`` of the downloaded file, ``index_sha256`` the index published,
    ``url``, ``size_bytes``); ``status`` (``ok`` or ``failed``, e.g. no wheel);
    ``error``; and when ok the fields of :func:`release_report`. A probe that
    failed keeps its failure text in ``error``; it is never dropped.

    Args:
        data: The parsed JSON.
        name: What to call the document in error messages (its file name).

    Raises:
        ValueError: a field is missing or malformed; the message names it.
    """
    keys = ("schema_version", "kind", "command", "started_utc", "finished_utc", "git")
    keys += ("sources", "host", "capabilities", "kernels", "families", "log", "releases")
    _require_keys(data, keys, name)
    commit = data["git"].get("commit") if isinstance(data["git"], dict) else None
    _require(
        isinstance(commit, str) and COMMIT.fullmatch(commit) is not None,
        f"{name}.git.commit",
        "must be the full 40-hex commit the matrix ran at",
    )
    _require(
        data["schema_version"] == MATRIX_SCHEMA_VERSION,
        f"{name}.schema_version",
        f"expected {MATRIX_SCHEMA_VERSION}, got {data['schema_version']!r}",
    )
    _require(data["kind"] == MATRIX_KIND, f"{name}.kind", f"expected {MATRIX_KIND!r}")
    _require(list(data["families"]) == list(FAMILIES), f"{name}.families", "differ from FAMILIES")
    _require(list(data["kernels"]) == list(KERNELS), f"{name}.kernels", "differ from KERNELS")
    capabilities = data["capabilities"]
    _require(
        isinstance(capabilities, list) and all(type(c) is int for c in capabilities),
        f"{name}.capabilities",
        "must be a list of ints",
    )
    for path, digest in data["sources"].items():
        _require(
            isinstance(digest, str) and _SHA256.fullmatch(digest) is not None,
            f"{name}.sources[{path!r}]",
            "must be a SHA-256 hex digest",
        )
    releases = data["releases"]
    _require(isinstance(releases, list) and releases, f"{name}.releases", "must not be empty")
    for i, r in enumerate(releases):
        _validate_release(r, f"{name}.releases[{i}]", capabilities)
    versions = [r["version"] for r in releases]
    _require(len(set(versions)) == len(versions), f"{name}.releases", "a version appears twice")
    return data


def probe_table(probes: list[CompileProbe]) -> list[dict]:
    """Flat rows for display: kernel, capability, target, one column per family, status."""
    rows = []
    for p in probes:
        counts = p.counts or dict.fromkeys(FAMILIES)
        status = "ok" if p.compiled else (p.error or "failed").splitlines()[0]
        rows.append(
            {"kernel": p.kernel, "capability": p.capability, "target": p.target}
            | counts
            | {"status": status}
        )
    return rows


def _format_table(rows: list[dict]) -> str:
    columns = list(rows[0])
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cmd_probe(args: argparse.Namespace) -> int:
    from kernel_portfolio.errors import UserError

    try:
        probes = probe(
            args.capability or CAPABILITIES, args.kernel or KERNELS, isolate=args.isolate
        )
    except ValueError as err:
        raise UserError(str(err)) from None
    if args.json:
        print(json.dumps([p.to_dict() for p in probes], indent=2))
    else:
        print(f"triton {triton.__version__}, ahead-of-time compile, no GPU used")
        print(_format_table(probe_table(probes)))
    return 0


def _cmd_ptxas(args: argparse.Namespace) -> int:
    from kernel_portfolio.errors import UserError

    try:
        source = compile_probe(args.kernel, args.capability)
        if source.ptx is None:
            raise UserError(f"no PTX for {args.kernel} at {args.capability}: {source.error}")
        targets = args.target or [f"sm_{args.capability}a", f"sm_{args.capability}"]
        runs = [run_ptxas(source.ptx, gpu_name) for gpu_name in targets]
    except ValueError as err:
        raise UserError(str(err)) from None
    for run in runs:
        verdict = "accepted" if run.ok else f"rejected (exit code {run.returncode})"
        print(f"== {run.ptxas} {run.version} --gpu-name={run.gpu_name}: {verdict}")
        if run.output:
            print(run.output)
    return 0


def _cmd_rule(args: argparse.Namespace) -> int:
    rule = arch_rule()
    print(f"triton {triton.__version__}: {rule.path}")
    for number, text in rule.lines:
        print(f"{number:5d}  {text}")
    return 0


def register(subparsers) -> None:
    """Add ``kp arch probe``, ``kp arch ptxas`` and ``kp arch rule`` to the ``kp`` parser."""
    arch = subparsers.add_parser(
        "arch", help="ahead-of-time compile probes for GPU targets (no GPU needed)"
    )
    sub = arch.add_subparsers(dest="arch_command", required=True)

    p = sub.add_parser("probe", help="compile probe kernels per capability; count PTX families")
    p.add_argument("--capability", type=int, action="append", help="e.g. 120; repeatable")
    p.add_argument("--kernel", choices=KERNELS, action="append", help="repeatable")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--isolate", action="store_true", help="compile each in a child process")
    p.set_defaults(func=_cmd_probe)

    p = sub.add_parser("ptxas", help="assemble a probe's PTX with the bundled ptxas per target")
    p.add_argument("--capability", type=int, default=120, help="compile for this (default 120)")
    p.add_argument("--kernel", choices=KERNELS, default="descriptor")
    p.add_argument(
        "--target", action="append", help="e.g. sm_120; repeatable (default: with and without a)"
    )
    p.set_defaults(func=_cmd_ptxas)

    p = sub.add_parser("rule", help="show Triton's rule for the architecture suffix")
    p.set_defaults(func=_cmd_rule)
