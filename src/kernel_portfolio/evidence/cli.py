"""``kp claims check SITE`` and ``kp claims list SITE``: the gate from the command line.

``check`` exits 0 when every measured-looking figure of the built site is a
claim backed by a current saved result, 1 when the gate finds a problem (each
printed with its page), and 2 for a usage mistake (no built site there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernel_portfolio.errors import UserError
from kernel_portfolio.evidence import gate


def register(subparsers) -> None:
    """Add the ``claims`` command and its ``check`` and ``list`` subcommands."""
    parser = subparsers.add_parser(
        "claims", help="check or list the measured figures of a built site"
    )
    sub = parser.add_subparsers(dest="claims_command", required=True)
    for name, func, text in (
        ("check", _check, "fail unless every measured-looking figure is a current claim"),
        ("list", _list, "list every claim of the site and the allow-list"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("site", nargs="?", default="site", help="built site folder (site/)")
        p.add_argument("--root", help="repository root with results/ (default: found)")
        p.add_argument("--allowlist", help=f"allow-list file (default: ROOT/{gate.ALLOWLIST})")
        p.set_defaults(func=func)


def _run(args: argparse.Namespace) -> tuple[gate.Report, Path]:
    """Run the gate; returns the report and the allow-list file it used."""
    from kernel_portfolio.results import ResultError, repo_root

    site = Path(args.site)
    if not site.is_dir() or not any(site.rglob("*.html")):
        raise UserError(f"{site} is not a built site; build it first with `make site`")
    try:
        root = Path(args.root) if args.root else repo_root()
    except ResultError as err:
        raise UserError(str(err)) from err
    allowlist = Path(args.allowlist) if args.allowlist else root / gate.ALLOWLIST
    if args.allowlist and not allowlist.is_file():
        raise UserError(f"allow-list {allowlist} does not exist")
    try:
        return gate.check_site(site, root, allowlist=allowlist), allowlist
    except ValueError as err:  # an allow-list that is not a list of entries
        raise UserError(str(err)) from err


def _check(args: argparse.Namespace) -> int:
    report, _ = _run(args)
    if report.ok:
        print(f"evidence gate: ok: {report.pages} pages, {len(report.claims)} claims")
    else:
        print(report.summary())
    return 0 if report.ok else 1


def _list(args: argparse.Namespace) -> int:
    report, allowlist = _run(args)
    for c in report.claims:
        impl = c.impl + (f"/{c.baseline}" if c.baseline else "")
        print(
            "\t".join(
                [c.page or "home", c.text, c.result_id, c.case_id, f"{impl} {c.stat}", c.status]
            )
        )
    entries, _ = gate.load_allowlist(allowlist)
    for entry in entries:
        where = ",".join(entry.pages) or "any page"
        print("\t".join(["allow-list", entry.text, where, entry.reason or "NO REASON"]))
    if not report.ok:
        print(report.summary())
    return 0 if report.ok else 1
