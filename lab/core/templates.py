"""The Jinja environment of gpulab's pages: templates/ (beside lab/), HTML escaped, an undefined name an error."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def environment(**options):
    """A ``jinja2.Environment`` over templates/: autoescaped, ``StrictUndefined``, block tags' lines trimmed;
    ``options`` (Environment's keyword arguments) add to or replace these. jinja2 is imported here, on first use."""
    import jinja2

    settings = {"autoescape": True, "undefined": jinja2.StrictUndefined, "trim_blocks": True, "lstrip_blocks": True}
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), **{**settings, **options})
