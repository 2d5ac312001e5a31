"""The Jinja environment of gpulab's pages: templates/ (beside lab/), HTML escaped, an undefined name an error;
and the two ways a text read from the inputs goes into a Markdown page (a table cell, a code span)."""

from __future__ import annotations

import re
from pathlib import Path

from lab.core.errors import printable

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def environment(**options):
    """A ``jinja2.Environment`` over templates/: autoescaped, ``StrictUndefined``, block tags' lines trimmed;
    ``options`` (Environment's keyword arguments) add to or replace these. jinja2 is imported here, on first use."""
    import jinja2

    settings = {"autoescape": True, "undefined": jinja2.StrictUndefined, "trim_blocks": True, "lstrip_blocks": True}
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), **{**settings, **options})


def md_text(value) -> str:
    """A text read from the inputs as Markdown shows it inside a table row: every line break a space, other
    control characters as \\x.. escapes, ``|`` escaped, ``<`` an entity (no HTML of a log's making)."""
    text = printable(" ".join(str(value).splitlines()))
    return text.replace("|", "\\|").replace("<", "&lt;")


def md_code(value) -> str:
    """A path as one Markdown code span, whatever backticks it holds (a fence one longer than its longest run)."""
    text = printable(" ".join(str(value).splitlines()))
    fence = "`" * (max(map(len, re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
