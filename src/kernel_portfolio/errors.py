"""The error every ``kp`` command turns into one line: a mistake the user can fix.

It lives apart from :mod:`kernel_portfolio.cli`, which imports every
subcommand's module: those modules, and library code they call (the results
package, the benchmark environment), raise it without importing the CLI.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit code 2 by default.

    Args:
        message: What is wrong and what to do, in one line.
        code: The exit status of the ``kp`` command.
    """

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
