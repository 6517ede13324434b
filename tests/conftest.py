"""Session set-up shared by every test module.

Without a CUDA device the kernels run under Triton's interpreter, which must be
switched on before ``triton`` is first imported, so this happens here, at
collection time. Tests marked ``gpu`` are skipped without CUDA; everything else
runs on whichever device is present (``device`` fixture).
"""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def _interpreter_index_fix() -> None:
    """Let triton 3.6's interpreter take ``range`` bounds from tensors under numpy >= 2.4.

    The interpreter turns a scalar into a Python int with ``int()`` of a
    one-element array, which numpy 2.4 refuses, so any loop such as
    ``range(0, n_cols, BLOCK)`` fails (triton-lang/triton#9171, fixed upstream
    by #9172 after 3.6.0). This re-patches ``tensor.__index__`` per launch.
    """
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    _interpreter_index_fix()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def device() -> str:
    """The device kernels run on in this session: ``cuda``, else ``cpu`` (interpreter)."""
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
