"""Evidence for every measured number: quoting, evidence pages, the gate, the site hook.

``from kernel_portfolio.evidence import quote`` is the notebook half of the one
way to put a measured figure on a page (Markdown pages write
``{{ claim RESULT CASE IMPL STAT }}``). :mod:`.gate` refuses a built site with a
figure no saved result backs; :mod:`.sitebuild` is what ``mkdocs.yml``'s hook
runs; :mod:`.cli` adds ``kp claims check`` and ``kp claims list``.
"""

from kernel_portfolio.evidence.quote import Claim, quote

__all__ = ["Claim", "quote"]
