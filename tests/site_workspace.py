"""Copies of the working tree to build the site in, for the site, gate and browser tests.

The real ``results/`` may hold no benchmark result yet, so the fixture
workspace adds a synthetic one (:func:`fixture_result`, labelled as not a
measurement) and two pages that quote it: a Markdown page with ``{{ claim }}``
and a notebook with ``quote()`` and ``charts.show()``, both with claims in
places no link can go (attributes, a chart's title) too. A copy is a git
repository that reads this checkout's history (:func:`link_history`), where
archived results are checked against the sources at their commit. Nothing
here touches the working tree itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_ID = "fixture/smoke"
SOFTMAX = "softmax/fwd/1024x4096/float16"
MATMUL = "matmul/fwd/512x512x512/float16"

_GBPS = f"{{{{ claim {FIXTURE_ID} {SOFTMAX} ours gbps }}}}"
FIXTURE_PAGE = f"""# Fixture claims

Softmax reaches {{{{ claim {FIXTURE_ID} {SOFTMAX} ours gbps }}}}
({{{{ claim {FIXTURE_ID} {SOFTMAX} ours pct_copy }}}} of copy bandwidth) in
{{{{ claim {FIXTURE_ID} {SOFTMAX} ours median_us }}}}, which is
{{{{ claim {FIXTURE_ID} {SOFTMAX} ours/torch speedup }}}} the speed of torch.
The GEMM reaches {{{{ claim {FIXTURE_ID} {MATMUL} ours tflops }}}},
{{{{ claim {FIXTURE_ID} {MATMUL} ours pct_cublas }}}} of cuBLAS.

The syntax, shown literally: `{{{{ claim {FIXTURE_ID} {SOFTMAX} ours gbps }}}}`.

Claims where no link can go: a link's title and a raw HTML attribute show their text,
<abbr title="{{{{ claim {FIXTURE_ID} {SOFTMAX} ours median_us }}}} a call">the median</abbr>.

[Back to the fixture notebook](fixture-notebook.py "softmax at {_GBPS}")
"""

FIXTURE_NOTEBOOK = f"""# %% [markdown]
# # Fixture notebook
#
# Quotes and a chart, the way case studies make them.

# %%
import html

from IPython.display import HTML, Markdown, display

from kernel_portfolio import charts
from kernel_portfolio.evidence import quote
from kernel_portfolio.results import load, repo_root

case = "{SOFTMAX}"
ratio = quote('{FIXTURE_ID}', case, 'speedup', baseline='torch')
display(Markdown(f"Ours: {{quote('{FIXTURE_ID}', case, 'gbps')}}, {{ratio}} torch."))
display(HTML(f'<abbr title="{{html.escape(str(ratio))}} torch">the ratio</abbr>'))

# %%
result = load(repo_root() / "results/{FIXTURE_ID}.json")
fig = charts.summary_figure(result.frame(), "softmax")
fig.update_layout(title=f"softmax: ours at {{ratio}} torch")
charts.show(fig, "fixture-softmax")

# %% [markdown]
# [Back to the fixture claims](fixture-claims.md)
"""

# Without git (an unpacked archive), skip what .gitignore would.
_SKIP_DIRS = {".git", "site", ".venv", ".cache", "__pycache__", ".pytest_cache", ".ruff_cache",
              ".whl", ".gl", "build", "dist"}  # fmt: skip


def _tree_files() -> list[str]:
    """Files of the working tree that git would commit (tracked or not ignored)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        return [f for f in out.split("\0") if f and (ROOT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
        ]


def git_out(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``: its stripped stdout, or ``None`` when git fails."""
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def link_history(dest: Path) -> Path:
    """Make ``dest`` a git repository that reads this checkout's commits (no copy of them).

    ``git init`` and an alternate object store: ``git cat-file`` in ``dest``
    finds every object of this checkout, as an archived result's check needs.
    Nothing is done where this checkout is not a git repository.
    """
    objects = git_out(ROOT, "rev-parse", "--path-format=absolute", "--git-path", "objects")
    if objects is not None:
        subprocess.run(["git", "init", "-q", str(dest)], check=True, capture_output=True)
        (dest / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    return dest


def fixture_result(root: Path, **kwargs) -> dict:
    """:func:`kernel_portfolio.bench.records.fixture_result` with a full commit, as a run records.

    The commit is the one checked out at ``root`` when it has one, else this
    checkout's: a synthetic result has none of its own, and the schema
    requires one.
    """
    from kernel_portfolio.bench import records

    data = records.fixture_result(root, **kwargs)
    commit = git_out(Path(root), "rev-parse", "--verify", "-q", "HEAD^{commit}")
    data["git"] = {"commit": commit or git_out(ROOT, "rev-parse", "HEAD"), "dirty": False}
    return data


def copy_tree(dest: Path, *, light: bool = False) -> Path:
    """Copy the working tree to ``dest`` (a git repository reading this one's history).

    Args:
        dest: An empty or missing folder.
        light: Replace every jupytext notebook (case studies, notebook
            lessons) with a one-cell stub of the same name, for a fast build
            of everything else in which links to those pages still resolve.
    """
    for rel in _tree_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if light and _is_notebook(rel):
            target.write_text(
                f"# %% [markdown]\n# # {Path(rel).stem}\n#\n# Not executed in this build.\n",
                encoding="utf-8",
            )
            continue
        shutil.copy2(ROOT / rel, target)
    return link_history(dest)


def _is_notebook(rel: str) -> bool:
    top_case_study = rel.startswith("case_studies/") and rel.count("/") == 1
    return rel.endswith(".py") and (top_case_study or rel.startswith("docs/"))


def add_fixture(ws: Path) -> None:
    """Add the synthetic result (with a log) and the two pages that quote it."""
    from kernel_portfolio.results import save

    data = fixture_result(ws)
    data["log"] = "smoke.log"
    save(data, ws / "results" / f"{FIXTURE_ID}.json")
    (ws / "results" / FIXTURE_ID).with_suffix(".log").write_text(
        "synthetic fixture: no run, no log\n", encoding="utf-8"
    )
    (ws / "docs" / "fixture-claims.md").write_text(FIXTURE_PAGE, encoding="utf-8")
    (ws / "docs" / "fixture-notebook.py").write_text(FIXTURE_NOTEBOOK, encoding="utf-8")
    with open(ws / "mkdocs.yml", "a", encoding="utf-8") as fh:
        fh.write("  - Fixtures:\n      - fixture-claims.md\n      - fixture-notebook.py\n")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Build:
    """One ``mkdocs build`` in a workspace, for ``site_url`` ``http://127.0.0.1:<port>/``."""

    ws: Path
    returncode: int
    output: str
    seconds: float
    port: int

    @property
    def site(self) -> Path:
        return self.ws / "site"


def build(ws: Path, timeout: int = 300) -> Build:
    """Run ``mkdocs build`` (strict, with the gate) in ``ws``, as ``make site`` does.

    The site is built for a free local port: Material's instant navigation
    only takes over links on the origin ``site_url`` names, so a browser test
    serves the site there.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KP_ROOT", "TRITON_INTERPRET")}
    env["NO_MKDOCS_2_WARNING"] = "1"
    env["SITE_URL"] = f"http://127.0.0.1:{port}/"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build"],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds = time.perf_counter() - start
    return Build(ws, proc.returncode, proc.stdout + proc.stderr, seconds, port)


_BUILT: dict[str, Build] = {}


def fixture_site(tmp_path_factory) -> Build:
    """The full site with the fixture result, built once per test session."""
    if "full" not in _BUILT:
        ws = copy_tree(tmp_path_factory.mktemp("site-full"))
        add_fixture(ws)
        _BUILT["full"] = build(ws)
    return _BUILT["full"]
