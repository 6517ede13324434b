"""``kp course init DIR`` and ``kp check NAME``: the course's commands.

``kp check`` runs the checker in a fresh Python process, which switches
Triton's interpreter on (``TRITON_INTERPRET=1``) before it first imports
``triton`` when there is no GPU, whatever this process has imported.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from kernel_portfolio.course import EXERCISES, exercise, packaged_file
from kernel_portfolio.errors import UserError

#: A check that runs longer than this is stopped (a kernel loop that never ends).
CHECK_TIMEOUT_S = 120


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kp course init`` and ``kp check`` to the ``kp`` parser."""
    course = subparsers.add_parser("course", help="the Triton course: copy its exercises")
    course_sub = course.add_subparsers(dest="course_command", required=True)
    init = course_sub.add_parser(
        "init", help="copy the exercise starters (Triton kernels with TODOs) into DIR"
    )
    init.add_argument("dir", type=Path, metavar="DIR")
    init.add_argument("--force", action="store_true", help="overwrite exercise files in DIR")
    init.set_defaults(func=init_command)

    names = ", ".join(ex.name for ex in EXERCISES)
    check = subparsers.add_parser(
        "check",
        help="check a course exercise: PASS (exit 0), FAIL (1), TODO (2), cannot run here (3)",
    )
    check.add_argument("name", metavar="NAME", help=f"the exercise: {names}")
    check.add_argument(
        "--dir", type=Path, default=Path("."), help="folder holding your exercises (default: .)"
    )
    check.add_argument(
        "--solution", action="store_true", help="check the reference solution instead of yours"
    )
    check.set_defaults(func=check_command)


def init_command(args: argparse.Namespace) -> int:
    """Copy every starter into ``args.dir``; refuse to overwrite unless ``args.force``."""
    folder: Path = args.dir
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} exists and is not a folder")
    targets = [folder / ex.filename for ex in EXERCISES]
    existing = [t for t in targets if t.exists()]
    if existing and not args.force:
        raise UserError(
            f"{existing[0]} already exists ({len(existing)} exercise file(s) in {folder}); "
            "nothing was copied. Use --force to overwrite them with fresh starters"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for ex, target in zip(EXERCISES, targets, strict=True):
        with packaged_file("starters", ex) as starter:
            shutil.copyfile(starter, target)
    print(f"copied {len(targets)} exercises into {folder}:")
    for ex in EXERCISES:
        print(f"  {ex.filename:28} kp check {ex.name} --dir {folder}")
    return 0


def check_command(args: argparse.Namespace) -> int:
    """Check one exercise in a fresh process and return its exit code."""
    try:
        ex = exercise(args.name)
    except ValueError as err:
        raise UserError(str(err)) from None
    if args.solution:
        with packaged_file("solutions", ex) as path:
            return run_checker(ex.name, path)
    path = args.dir / ex.filename
    if not path.is_file():
        raise UserError(f"no {path}; copy the exercises first: kp course init {args.dir}")
    return run_checker(ex.name, path)


def run_checker(name: str, path: Path) -> int:
    """Run the checker for ``name`` on ``path`` in a fresh process; return its exit code.

    The child (:func:`kernel_portfolio.course.checkers.main`) switches Triton's
    interpreter on when it finds no GPU, before it imports ``triton``.
    """
    command = [sys.executable, "-m", "kernel_portfolio.course.checkers", name, str(path)]
    try:
        child = subprocess.run(command, timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        print(f"kp check {name}: FAIL: still running after {CHECK_TIMEOUT_S} seconds")
        print("  hint: does a loop in your kernel ever end? (range(start, stop, step))")
        return 1
    if child.returncode < 0:
        signame = signal.Signals(-child.returncode).name
        print(f"kp check {name}: FAIL: the check crashed ({signame})")
        print("  hint: an unmasked load or store far outside its tensor can do that")
        return 1
    return child.returncode
