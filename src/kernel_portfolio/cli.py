"""The ``kp`` command: bench, env, claims, arch, course, check.

Each subcommand lives beside the code it drives and registers itself here
through a ``register(subparsers)`` function. A user mistake (unknown suite,
wrong path, no GPU) prints one line and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from kernel_portfolio.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    from kernel_portfolio import arch
    from kernel_portfolio.bench import cli as bench_cli
    from kernel_portfolio.course import cli as course_cli
    from kernel_portfolio.evidence import cli as evidence_cli

    parser = argparse.ArgumentParser(prog="kp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (bench_cli, evidence_cli, arch, course_cli):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"kp {args.command}: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print("kp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader stopped early (`kp bench --list | head`): not an error. Point
        # stdout at /dev/null so Python's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
