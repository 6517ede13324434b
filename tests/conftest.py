"""Session set-up shared by every test module.

Without a CUDA device the kernels run under Triton's interpreter, which must be
switched on before ``triton`` is first imported, so this happens here, at
collection time. Tests marked ``gpu`` are skipped without CUDA; everything else
runs on whichever device is present (``device`` fixture).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test runs a worker per core: a worker that also spread its tensor
    # arithmetic over every core would only contend with the others.
    torch.set_num_threads(1)


def pytest_configure(config):
    # pyproject.toml pins numpy<2.4: numpy 2.4 refuses int() of a one-element array,
    # which triton 3.6's interpreter does for every loop with a run-time bound.
    if not HAS_CUDA and tuple(map(int, np.__version__.split(".")[:2])) >= (2, 4):
        raise pytest.UsageError(
            f"numpy {np.__version__} breaks triton 3.6's interpreter (triton-lang/triton#9171); "
            "install the project's pin: pip install -e '.[test]'"
        )


#: Modules whose module-scoped fixtures cost seconds, each kept on one worker
#: (``make test`` runs ``pytest -n auto --dist loadgroup``; the rest spread test
#: by test). The three site modules share one build (``site_workspace.fixture_site``).
_ONE_WORKER = {
    "test_browser": "site",
    "test_gate": "site",
    "test_site_build": "site",
    "test_spills": "spills",
    "test_arch": "arch",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        group = _ONE_WORKER.get(item.module.__name__)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _language_namespaces() -> list:
    """``triton.language``, its submodules and classes: what the interpreter patches."""
    import inspect

    import triton.language as tl

    classes = [v for _, v in inspect.getmembers(tl.core, inspect.isclass)
               if v.__module__.startswith("triton.language")]  # fmt: skip
    return [tl, tl.core, tl.math, *classes]


@pytest.fixture(autouse=True, scope="module")
def _triton_language_restored():
    """Leave ``triton.language`` after each test module as it was before it.

    triton 3.6's interpreter patches the language for each launch and undoes
    it, except around a ``@triton.jit`` helper called from a kernel, whose
    patches it never undoes. A later real compile in the same process (the
    ahead-of-time probes of ``kernel_portfolio.arch``) then fails. Without
    the interpreter (on a GPU) nothing is patched and this restores nothing.
    """
    saved = [(ns, dict(vars(ns))) for ns in _language_namespaces()]
    yield
    for ns, before in saved:
        for name in set(vars(ns)) - set(before):
            delattr(ns, name)
        for name, value in before.items():
            if vars(ns).get(name) is not value:
                setattr(ns, name, value)


@pytest.fixture
def device() -> str:
    """The device kernels run on in this session: ``cuda``, else ``cpu`` (interpreter)."""
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def small_pieces(monkeypatch):
    """Block pieces (``plans.block_pieces``) for rows the interpreter can run.

    The shipped rule holds only wide rows just past a power of two as two
    pieces; this one takes any block and a tail of up to a quarter of it, so
    1100 columns run as 1024 + 128 and 129 as 128 + 1.
    """
    from kernel_portfolio import plan_rule  # after TRITON_INTERPRET is set, above

    monkeypatch.setattr(plan_rule, "PIECE_MIN_BLOCK", 1)
    monkeypatch.setattr(plan_rule, "PIECE_TAIL_DIVISOR", 4)
