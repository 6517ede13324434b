"""Run the sm_120a compile probes against several Triton releases; no GPU needed.

For each release this script downloads the triton wheel from the package index
(``pip download --no-deps``; only ``--index-url``, default PyPI: pip runs without
the machine's pip configuration, so no mirror or extra index can supply the
file), hashes it, installs it alone into a scratch
virtual environment under ``--work-dir`` (``python -m venv`` +
``pip install --no-deps``; ahead-of-time compiles need neither torch nor a
driver), and runs ``kernel_portfolio.arch.release_report`` inside it: which
``.target`` each capability gets, what the PTX holds, which ``ptxas`` the wheel
bundles, Triton's own suffix rule, and the ``ptxas`` checks of
``arch.PTXAS_CHECKS``. Each compile runs in its own child process, so a release
that aborts on a target it does not know yields a failed row with the failure
text, never a missing one.

Writes ``<out>/matrix.json`` (schema: ``kernel_portfolio.arch.validate_release_matrix``;
validated before it is written, written atomically) and the raw console log
``<out>/matrix.log``. The document holds no timings.

Usage::

    python scripts/triton_release_matrix.py                    # newest patch of 3.2 onwards
    python scripts/triton_release_matrix.py --versions 3.3.1 3.6.0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from kernel_portfolio import arch
from kernel_portfolio.results import git_state, source_hashes, write_text_atomic

REPO = Path(__file__).resolve().parents[1]
OLDEST = (3, 2)  # the first release line with Blackwell (capability 100) in its pipeline
SOURCES = ("src/kernel_portfolio/arch.py", "scripts/triton_release_matrix.py")
REPORT_CODE = (
    "import json, sys; from kernel_portfolio.arch import release_report; "
    "json.dump(release_report(isolate=True), sys.stdout)"
)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wheel_sha256(path: Path) -> str:
    """SHA-256 of the file's exact bytes, as the package index publishes it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Log:
    """The raw console log: every command and everything it printed."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def note(self, text: str) -> None:
        self.parts.append(text.rstrip("\n") + "\n")

    def run(self, cmd: list[str], *, env: dict | None = None, cwd: Path | None = None):
        """Run ``cmd``, log it with its output, and return the CompletedProcess."""
        self.note("$ " + shlex.join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
        for stream in (proc.stdout, proc.stderr):
            if stream.strip():
                self.note(stream)
        self.note(f"[exit status {proc.returncode}]")
        return proc


def pip_env() -> dict[str, str]:
    """Environment for pip: no configuration file, no index or find-links overrides."""
    dropped = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return env | {"PIP_CONFIG_FILE": os.devnull}


def pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def newest_patches(index_url: str, log: Log) -> list[str]:
    """The newest patch release of every minor line from ``OLDEST`` on, from the index."""
    proc = log.run(pip("index", "versions", "--index-url", index_url, "triton"), env=pip_env())
    match = re.search(r"Available versions: (.+)", proc.stdout)
    if proc.returncode or match is None:
        raise SystemExit("triton_release_matrix: `pip index versions triton` failed; see log")
    newest: dict[tuple[int, int], tuple[int, ...]] = {}
    for text in match.group(1).split(", "):
        if not re.fullmatch(r"\d+\.\d+\.\d+", text.strip()):
            continue  # pre-releases and odd tags
        version = tuple(int(x) for x in text.strip().split("."))
        if version[:2] >= OLDEST:
            newest[version[:2]] = max(newest.get(version[:2], version), version)
    return [".".join(map(str, v)) for _, v in sorted(newest.items())]


def fetch_wheel(version: str, index_url: str, wheel_dir: Path, log: Log) -> tuple[Path, dict]:
    """Download the wheel for this interpreter and describe it (file hash, index hash, URL)."""
    spec = f"triton=={version}"
    common = ["--no-deps", "--only-binary=:all:", "--progress-bar", "off", "--index-url", index_url]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "report.json")
        proc = log.run(
            pip("install", "--dry-run", "--ignore-installed", *common, "--report", str(report))
            + [spec],
            env=pip_env(),
        )
        if proc.returncode:
            raise RuntimeError(f"pip found no installable wheel for {spec}")
        info = json.loads(report.read_text())["install"][0]["download_info"]
    proc = log.run(pip("download", *common, "-d", str(wheel_dir), spec), env=pip_env())
    filename = info["url"].rsplit("/", 1)[-1]
    path = wheel_dir / filename
    if proc.returncode or not path.is_file():
        raise RuntimeError(f"pip download did not produce {filename}")
    wheel = {
        "filename": filename,
        "sha256": wheel_sha256(path),
        "index_sha256": info.get("archive_info", {}).get("hashes", {}).get("sha256"),
        "url": info["url"],
        "size_bytes": path.stat().st_size,
    }
    log.note(f"sha256 {wheel['sha256']}  {filename}  (index: {wheel['index_sha256']})")
    return path, wheel


def probe_release(wheel: Path, venv: Path, log: Log) -> dict:
    """Install ``wheel`` alone into a fresh venv and return its ``release_report``."""
    shutil.rmtree(venv, ignore_errors=True)
    if log.run([sys.executable, "-m", "venv", str(venv)]).returncode:
        raise RuntimeError("python -m venv failed")
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "--disable-pip-version-check", "install", "--no-deps"]
    if log.run([*install, "--progress-bar", "off", str(wheel)], env=pip_env()).returncode:
        raise RuntimeError(f"pip install {wheel.name} failed")
    # Only the scratch venv and this repo's sources; no TRITON_* override leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTHON"))}
    env.update(PYTHONPATH=str(REPO / "src"), PYTHONNOUSERSITE="1")
    proc = log.run([python, "-c", REPORT_CODE], env=env, cwd=venv)
    if proc.returncode:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise RuntimeError(f"release_report failed (exit status {proc.returncode}):\n{tail}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", help="default: newest patch of each 3.x from 3.2")
    parser.add_argument("--index-url", default="https://pypi.org/simple", help="package index")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "triton-releases")
    parser.add_argument("--wheel-dir", type=Path, default=Path(tempfile.gettempdir(), "kp-wheels"))
    parser.add_argument(
        "--work-dir", type=Path, default=Path(tempfile.gettempdir(), "kp-triton-venvs")
    )
    args = parser.parse_args(argv)

    log = Log()
    started = utc_now()
    command = shlex.join(["python", "scripts/triton_release_matrix.py", *(argv or sys.argv[1:])])
    log.note(f"# {command}\n# started {started}")
    versions = args.versions or newest_patches(args.index_url, log)
    args.wheel_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    releases = []
    for version in tqdm(versions, desc="triton releases", unit="release"):
        log.note(f"\n## triton {version}")
        wheel = dict.fromkeys(("filename", "sha256", "index_sha256", "url", "size_bytes"))
        row = {"version": version, "wheel": wheel, "status": "ok", "error": None}
        venv = args.work_dir / f"triton-{version}"
        try:
            wheel_path, row["wheel"] = fetch_wheel(version, args.index_url, args.wheel_dir, log)
            row.update(probe_release(wheel_path, venv, log))
        except RuntimeError as err:
            row.update(status="failed", error=str(err))
            log.note(f"FAILED: {err}")
        finally:
            shutil.rmtree(venv, ignore_errors=True)
        releases.append(row)
    finished = utc_now()
    log.note(f"\n# finished {finished}")

    document = {
        "schema_version": arch.MATRIX_SCHEMA_VERSION,
        "kind": arch.MATRIX_KIND,
        "command": command,
        "started_utc": started,
        "finished_utc": finished,
        "git": git_state(REPO),
        "sources": source_hashes(REPO, SOURCES),
        "index_url": args.index_url,
        "host": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "machine": platform.machine(),
        },
        "capabilities": list(arch.CAPABILITIES),
        "kernels": list(arch.KERNELS),
        "families": list(arch.FAMILIES),
        "log": "matrix.log",
        "releases": releases,
    }
    arch.validate_release_matrix(document, name="matrix.json")
    write_text_atomic(args.out / "matrix.log", "".join(log.parts))
    write_text_atomic(args.out / "matrix.json", json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out / 'matrix.json'} and matrix.log ({len(releases)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
