"""Every ``gpulab:`` setting, declared once: its key, what it takes, its default, range, unit and one line of doc.

``DECLARED`` (lab.core.settingdefs) is the one place a setting lives.
Everything else is made from it here: the collection-level defaults Invoke merges under every user layer
(``defaults``), the JSON schema each layer is checked against (``schema``),
the range checks that name the setting and the file (``problems``), the one
accessor readers go through (``read``, ``group``, ``default``) and the
README's settings table (``table``; ``python -m lab.core.settings`` prints
it, tests/unit/test_settings_declared.py holds README to it). A new setting is
one line in lab.core.settingdefs, then the README table regenerated; a
reader imports this module and asks ``read``/``group``, never
``.get(key, fallback)``.
"""

from __future__ import annotations

import re

from lab.core import limits
from lab.core.errors import ConfigError, excerpt
from lab.core.settingdefs import DECLARED, INHERIT, Setting
from lab.core.settingdefs import KINDS, SLURM_WORD  # noqa: F401 - their readers import them from here

WHERE = "~/.invoke.yaml, invoke.yaml, invoke -f FILE or INVOKE_GPULAB_*"  # a merged value: any of these
_NUMBER_TEXT = r"^\s*[-+0-9.eE]+\s*$"
_FLAG_TEXT = r"^\s*(?i:true|false|yes|no|on|off|1|0)\s*$"
_MISSING = object()
FLAG_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
FLAG_HELP = "true/false, yes/no, on/off or 1/0"


def flag(value, what: str, layer: str | None = WHERE) -> bool:
    """A yes/no setting as Invoke users write it (``true/false``, ``yes/no``, ``on/off``, ``1/0``, any case, in a
    file, a variable or on the command line) as a bool; anything else is one ConfigError line naming ``what``
    (the setting or variable) and the layer."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[value.strip().lower()]
    where = f" ({layer})" if layer else ""
    raise ConfigError(f"{what}: {excerpt(repr(value), 40)} is not {FLAG_HELP}{where}")


BY_KEY = {s.key: s for s in DECLARED}


def declared(key: str) -> Setting:
    """The declaration of ``gpulab.<key>``; ConfigError for a key no setting has."""
    if key not in BY_KEY:
        raise ConfigError(f'config gpulab.{key}: no such setting (README "Settings" lists them)')
    return BY_KEY[key]


def _is_group(key: str) -> bool:
    return any(k.startswith(key + ".") for k in BY_KEY)


def _nest(pairs) -> dict:
    out: dict = {}
    for key, value in pairs:
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def defaults() -> dict:
    """The gpulab section of the declared defaults (what Invoke holds at its collection level)."""
    return _nest((s.key, s.default) for s in DECLARED if s.default is not INHERIT)


def default(key: str):
    """The declared default of ``gpulab.<key>``, typed as ``read`` types it (a group: a dict of its leaves)."""
    return group(key, {}) if _is_group(key) else _typed(declared(key), declared(key).default, "")


# --------------------------------------------------------------------------- the schema


def _leaf_schema(s: Setting) -> dict:
    if s.kind == "path":
        return {"type": "string", "minLength": 1, "description": "a path"}
    if s.kind == "text":
        return {"type": "string", "maxLength": s.max_len}
    if s.kind == "list":
        return {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "description": "a comma list or a list of names",
        }
    if s.kind == "count":
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "description": "a number, or a word the option takes",
        }
    if s.kind == "flag":
        return {
            "anyOf": [{"type": "boolean"}, {"enum": [0, 1]}, {"type": "string", "pattern": _FLAG_TEXT}],
            "description": "true/false, yes/no, on/off or 1/0",
        }
    if s.kind == "choice":  # any case, as an option takes it (lab.core.fields.choice); read as the lowercase word
        words = "|".join(re.escape(w) for w in s.words)
        return {"type": "string", "pattern": rf"^\s*(?i:{words})\s*$", "choices": list(s.words)}
    options = [{"type": "number"}, {"type": "string", "pattern": _NUMBER_TEXT}, *({"const": w} for w in s.words)]
    if s.null:
        options.append({"type": "null"})
    return {"anyOf": options, "description": " or ".join(["a number", *s.words, *(["null"] if s.null else [])])}


def schema() -> dict:
    """The JSON schema of a gpulab: section, made from DECLARED: every key declared, nothing else."""
    root: dict = {"type": "object", "additionalProperties": False, "properties": {}}
    for s in DECLARED:
        *parents, leaf = s.key.split(".")
        node = root
        for part in parents:
            node = node["properties"].setdefault(
                part, {"type": "object", "additionalProperties": False, "properties": {}}
            )
        node["properties"][leaf] = {"description": s.doc, **_leaf_schema(s)}  # anyOf's own description wins:
        #   it is what a refused value is told it should be (lab.core.schema.describe)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "the gpulab section of the Invoke configuration (made from lab.core.settings.DECLARED)",
        **root,
    }


# --------------------------------------------------------------------------- values: checked, typed, read


def _typed(s: Setting, value, source: str):
    """``value`` of ``s`` as its reader takes it; ConfigError naming the setting (and ``source``) otherwise."""
    where = f" ({source})" if source else ""
    what = f"config gpulab.{s.key}"
    if s.kind == "number":
        if value is None and s.null:
            return None
        if isinstance(value, str) and value.strip().lower() in s.words:
            return value.strip().lower()
        try:
            return limits.number(value, what, s.range)
        except ConfigError as exc:
            raise ConfigError(exc.message + "".join(f" or {w}" for w in s.words) + where) from None
    if s.kind == "flag":
        return flag(value, what, source or None)
    if s.kind == "choice":
        if isinstance(value, str) and value.strip().lower() in s.words:
            return value.strip().lower()
        raise ConfigError(f"{what}: {excerpt(repr(value), 40)} is not one of {', '.join(s.words)}{where}")
    if s.kind in ("count", "list"):  # the value as given, for the reader that parses it (lab.sweep.plan)
        try:
            if s.kind == "count":
                return limits.counts(value, what, s.range, s.words, many=s.many)
            return limits.names(value, what, s.words, s.pattern, s.items)
        except ConfigError as exc:
            raise ConfigError(exc.message + where) from None
    if s.kind == "text":
        text = "" if value is None else value
        if not isinstance(text, str) or len(text) > s.max_len or (s.pattern and not re.fullmatch(s.pattern, text)):
            raise ConfigError(
                f"{what}: {excerpt(repr(value), 60)} is not "
                f"{'a Slurm name or constraint' if s.pattern else 'a text'}{where}"
            )
        return text
    return value


def problems(section: dict, source: str) -> None:
    """ConfigError for the first value of ``section`` (plain data that fit ``schema()``) outside its range, one
    line naming ``gpulab.<key>`` and ``source`` (the file or variable it came from)."""
    for s in DECLARED:
        node = section
        for part in s.key.split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            _typed(s, node, source)


def group(prefix: str, section, source: str = "") -> dict:
    """The settings under ``gpulab.<prefix>`` (``section`` is that sub-section, plain data or None) as a dict of
    typed values, the declared default where it has none; ConfigError for a key no setting has."""
    if section is not None and not isinstance(section, dict):
        raise ConfigError(
            f"config gpulab.{prefix}: {excerpt(repr(section), 40)} is not a mapping of settings"
            + (f" ({source})" if source else "")
        )
    given = {str(k): v for k, v in (section or {}).items()}
    out: dict = {}
    for name in given:
        key = f"{prefix}.{name}"
        if key not in BY_KEY and not _is_group(key):
            raise ConfigError(f"config gpulab.{key}: no such setting" + (f" ({source})" if source else ""))
    for name in dict.fromkeys(k[len(prefix) + 1 :].split(".")[0] for k in BY_KEY if k.startswith(prefix + ".")):
        key = f"{prefix}.{name}"
        if _is_group(key):
            out[name] = group(key, given.get(name), source)
        elif name in given:
            out[name] = _typed(BY_KEY[key], given[name], source)
        elif BY_KEY[key].default is not INHERIT:
            out[name] = _typed(BY_KEY[key], BY_KEY[key].default, source)
        else:
            out[name] = None
    return out


def read(section, key: str, source: str = ""):
    """``gpulab.<key>`` of a merged section (plain data) as its reader takes it: a number inside its range (or
    its word), a bool, a choice, a path or text; a group as ``group`` gives it; the declared default where the
    section has none (None for a demo key that takes the top-level one)."""
    node = section
    for part in key.split("."):
        node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
    if _is_group(key):
        return group(key, None if node is _MISSING else node, source)
    s = declared(key)
    if node is _MISSING:
        return None if s.default is INHERIT else _typed(s, s.default, "")
    return _typed(s, node, source)


# --------------------------------------------------------------------------- the README table


def _shown(value) -> str:
    if value is INHERIT:
        return "as above"
    if value is None:
        return "null"
    if value == "":
        return "(empty)"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _takes(s: Setting) -> str:
    if s.kind == "number":
        lo, hi = (s.range.shown(v) for v in (s.range.lo, s.range.hi))
        head = ("whole " if s.range.integer else "") + f"{lo} to {hi}"
        return ", ".join([head, *s.words, *(["null"] if s.null else [])])
    if s.kind == "choice":
        return ", ".join(s.words)
    if s.kind == "count":
        lo, hi = (s.range.shown(v) for v in (s.range.lo, s.range.hi))
        return ", ".join([("a comma list of " if s.many else "") + f"whole {lo} to {hi}", *s.words])
    if s.kind == "list" and (s.words or s.items):
        return ", ".join([f"a comma list of {', '.join(s.items) or 'names'}", *s.words])
    return {"path": "a path", "text": "text", "list": "a comma list", "flag": "true/false"}[s.kind]


def table() -> str:
    """The README's settings table (markdown), one row per declared setting."""
    rows = ["| setting | default | takes | unit | what it does |", "|---|---|---|---|---|"]
    for s in DECLARED:
        cells = (f"`{s.key}`", _shown(s.default), _takes(s), s.unit, s.doc)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m lab.core.settings: the README's settings table
    print(table(), end="")
