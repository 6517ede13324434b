"""The Triton course: one exercise per lesson, with starters, solutions and checkers.

``kp course init DIR`` copies the starters (``starters/NN_name.py``, each a
Triton kernel with ``# TODO`` lines) into a folder of the learner's own;
``kp check NAME`` runs :mod:`kernel_portfolio.course.checkers` on the learner's
file. The reference solutions (``solutions/NN_name.py``) ship as package data,
apart from the starters, and CI checks them like a learner's file.

This module is plain Python (no torch, no triton), so ``kp`` can list the
exercises without paying for those imports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class Exercise:
    """One lesson's exercise.

    Attributes:
        number: Lesson number, 1 to 8.
        name: The name ``kp check`` takes, e.g. ``"add"``.
        lesson: The lesson page's file name under ``docs/course/`` without ``.md``.
        title: What the learner writes, in a few words.
    """

    number: int
    name: str
    lesson: str
    title: str

    @property
    def filename(self) -> str:
        """The exercise's file name, e.g. ``01_add.py``."""
        return f"{self.number:02d}_{self.name}.py"


EXERCISES: tuple[Exercise, ...] = (
    Exercise(1, "add", "01-programs-offsets-masks", "vector add: offsets and masks"),
    Exercise(2, "add2d", "02-strides-and-tiles", "2-D add of strided views"),
    Exercise(3, "row_sum", "03-reductions", "row sum with a float32 accumulator"),
    Exercise(4, "softmax", "04-softmax", "online softmax that survives -inf"),
    Exercise(5, "rms_norm", "05-rmsnorm", "RMSNorm forward and backward"),
    Exercise(6, "matmul", "06-gemm-tiling", "tiled GEMM in grouped order"),
    Exercise(7, "measure", "07-measuring", "a timing harness: timers, L2 flush, interleaving"),
    Exercise(8, "mutants", "08-from-test-to-published-number", "a test that can fail"),
)


def exercise(name: str) -> Exercise:
    """Look an exercise up by name.

    Raises:
        ValueError: no exercise has that name (the message lists them).
    """
    for ex in EXERCISES:
        if ex.name == name:
            return ex
    names = ", ".join(ex.name for ex in EXERCISES)
    raise ValueError(f"no exercise named {name!r}; the exercises are {names}")


@contextlib.contextmanager
def packaged_file(kind: str, ex: Exercise) -> Iterator[Path]:
    """Yield a filesystem path to a packaged starter or solution.

    Args:
        kind: ``"starters"`` or ``"solutions"``.
        ex: The exercise.
    """
    if kind not in ("starters", "solutions"):
        raise ValueError(f"kind must be 'starters' or 'solutions', got {kind!r}")
    with resources.as_file(resources.files(__name__) / kind / ex.filename) as path:
        yield path
