"""mkdocs hook (``hooks:`` in ``mkdocs.yml``): a thin wrapper over :mod:`.sitebuild`.

mkdocs loads this file by path, so it only forwards events; the logic, and the
gate it runs after the build, live in the package.
"""

from __future__ import annotations

from mkdocs.plugins import CombinedEvent, event_priority

from kernel_portfolio.evidence.sitebuild import SiteBuild

_build = SiteBuild()


def on_config(config):
    global _build
    _build = SiteBuild()
    _build.on_config(config)
    return config


# Before mkdocs-jupyter's on_files, so that it turns the case studies added
# here into notebook pages ...
@event_priority(100)
def _add_files(files, config):
    return _build.on_files(files, config)


# ... and after it, to give its notebook wrappers the source path they lose.
@event_priority(-100)
def _fix_notebook_files(files, config):
    return _build.fix_notebook_files(files)


on_files = CombinedEvent(_add_files, _fix_notebook_files)


def on_page_markdown(markdown, page, config, files):
    return _build.on_page_markdown(markdown, page)


def on_page_content(html, page, config, files):
    return _build.on_page_content(html, page, files)


def on_post_page(output, page, config):
    return _build.on_post_page(output, page)


def on_post_build(config):
    _build.on_post_build(config)
