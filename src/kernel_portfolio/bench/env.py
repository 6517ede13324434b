"""The environment a result records: GPU, versions, clocks and load.

NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``) is used when it is
importable, else ``nvidia-smi --query-gpu``; a value neither can give is
recorded as ``None``, never guessed.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import shutil
import subprocess
import sys

from kernel_portfolio.errors import UserError

#: Utilisation (percent) above which the GPU counts as busy at the start of a run.
BUSY_UTIL_PCT = 10

_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct"}


def gpu_slug(name: str) -> str:
    """A folder name for a GPU, from its name without vendor words.

    ``"NVIDIA H200"`` -> ``"h200"``; ``"NVIDIA GeForce RTX 4090"`` -> ``"rtx-4090"``.

    Raises:
        ValueError: nothing is left of the name once vendor words are dropped.
    """
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in _VENDOR_WORDS]
    if not words:
        raise ValueError(f"GPU name {name!r} gives no slug")
    return "-".join(words)


def require_gpu(hint: str = ""):
    """The current CUDA device's properties.

    Args:
        hint: Appended to the error message (what the user can do without a GPU).

    Raises:
        UserError: torch sees no CUDA GPU (exit code 2).
    """
    import torch

    if not torch.cuda.is_available():
        raise UserError(f"no CUDA GPU found (torch.cuda.is_available() is False){hint}")
    return torch.cuda.get_device_properties(torch.cuda.current_device())


def _nvml_handle(uuid: str | None):
    """``(pynvml, handle)`` of the GPU with this UUID (or the only GPU), else ``(None, None)``."""
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None, None
    if uuid:
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError:
            pass
    try:
        if pynvml.nvmlDeviceGetCount() == 1:
            return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except pynvml.NVMLError:
        pass
    return None, None


def _smi(uuid: str | None, fields: list[str]) -> list[str | None]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [None] * len(fields)
    cmd = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    cmd += ["-i", uuid] if uuid else ["-i", "0"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return [None] * len(fields)
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")] if out.strip() else []
    if len(values) != len(fields):
        return [None] * len(fields)
    return [None if v in ("", "[N/A]", "N/A") else v for v in values]


def _num(value) -> float | int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else number


def _uuid(props) -> str | None:
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def gpu_state(props) -> dict:
    """Utilisation, SM and memory clocks and temperature of the GPU right now."""
    uuid = _uuid(props)
    nvml, handle = _nvml_handle(uuid)
    if handle is not None:
        try:
            return {
                "utilization_pct": nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
                "temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            }
        except nvml.NVMLError:
            pass
    util, sm, mem, temp = _smi(
        uuid, ["utilization.gpu", "clocks.sm", "clocks.mem", "temperature.gpu"]
    )
    return {
        "utilization_pct": _num(util),
        "sm_clock_mhz": _num(sm),
        "mem_clock_mhz": _num(mem),
        "temperature_c": _num(temp),
    }


def _version(distribution: str) -> str | None:
    """An installed distribution's version (a baseline's), or None where it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def capture_env(props) -> dict:
    """The ``env`` block of a result for the GPU described by ``props``."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    uuid = _uuid(props)
    nvml, handle = _nvml_handle(uuid)
    driver = mem_clock = None
    if handle is not None:
        try:
            driver = nvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
            mem_clock = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
        except nvml.NVMLError:
            driver = mem_clock = None
    if driver is None:
        driver, mem_clock = _smi(uuid, ["driver_version", "clocks.max.mem"])
    l2 = getattr(props, "L2_cache_size", None)
    return {
        "gpu_name": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(l2) if l2 else None,
        "memory_clock_mhz": _num(mem_clock),
        "memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version,
        "liger_kernel": _version("liger-kernel"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": sys.executable,
    }
