"""mlperf-logging's compliance messages as one short line per failing rule.

The checker (``mlp_compliance.ComplianceChecker``) reports each failure as a
paragraph: the test's source, the whole log line, a dump of its state. A report
cell needs the rule and what broke it, so each message becomes a ``Failure``:
the rule file it came from (``common.yaml``, ``closed_resnet.yaml``), the key
the rule is about and a few words, e.g. ``cache_clear (common.yaml): line 6
logs null; fails ( v['value'] == True ) and ...``. A message of a form not
known here keeps its first line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from lab.core import plaindata

MAX_TEST = 90  # characters of a rule's test kept in a line
MAX_VALUE = 40  # characters of a logged value kept


@dataclass(frozen=True)
class Failure:
    file: str  # the rule file ("common.yaml"), "" where the checker does not say
    key: str  # the logged key the rule is about, "" for a rule of the whole log
    what: str  # a few words: what the log did against the rule

    @property
    def rule(self) -> str:
        """``key (file)``: how the report names the rule."""
        if self.key:
            return f"{self.key} ({self.file})" if self.file else self.key
        return self.file or "whole log"

    def line(self) -> str:
        return f"{self.rule}: {self.what}"


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _logged(full_line: str) -> str | None:
    """The value a ``:::MLL``/``:::MLLOG`` line logs, as JSON text, or None."""
    if full_line.lstrip().startswith(":::MLLOG"):
        body = full_line.split(":::MLLOG", 1)[1]
    else:
        m = re.search(r":\s*(\{.*\})\s*$", full_line)
        body = m.group(1) if m else ""
    try:
        value = plaindata.loads(body)["value"]
    except (ValueError, KeyError, TypeError):
        return None
    return _cut(json.dumps(value), MAX_VALUE)


_FORMS = [
    (
        re.compile(
            r"CHECK for '(?P<key>[^']*)' failed in line (?P<n>\d+):\n(?P<line>[^\n]*)\n"
            r"failed test:(?P<test>.*?)\ncurrent context",
            re.S,
        ),
        lambda m: (
            m["key"],
            "line {n}{logs}; fails {test}".format(
                n=m["n"],
                logs=(f" logs {v}" if (v := _logged(m["line"])) is not None else ""),
                test=_cut(m["test"], MAX_TEST),
            ),
        ),
    ),
    (
        re.compile(r"Failed executing CHECK code:\n(?P<test>.*?)\ntriggered by line:\n(?P<line>[^\n]*)", re.S),
        lambda m: (_key_of(m["line"]), f"its test cannot run on the logged line: {_cut(m['test'], MAX_TEST)}"),
    ),
    (
        re.compile(r"Failed executing code (?P<act>\w+) code triggered by line :\n(?P<line>[^\n]*)"),
        lambda m: (_key_of(m["line"]), f"its {m['act']} code cannot run on the logged line"),
    ),
    (
        re.compile(r"failed test:(?P<test>.*?)\ncurrent context", re.S),
        lambda m: ("", f"end of log fails {_cut(m['test'], MAX_TEST)}"),
    ),
    (
        re.compile(r"Required EXACTLY_ONE occurrence of '(?P<key>[^']*)' but found 0\s*$"),
        lambda m: (m["key"], "not logged (exactly one required)"),
    ),
    (
        re.compile(r"Required EXACTLY_ONE occurrence of '(?P<key>[^']*)' but found (?P<n>\d+)(?P<rest>.*)", re.S),
        lambda m: (
            m["key"],
            f"logged {m['n']} times (exactly one required)"
            + (f", values {_cut(m['rest'].split(':', 1)[-1], MAX_VALUE)}" if m["rest"].strip() else ""),
        ),
    ),
    (
        re.compile(r"Required AT_LEAST_ONE occurrence of '(?P<key>[^']*)' but found 0"),
        lambda m: (m["key"], "not logged (at least one required)"),
    ),
    (
        re.compile(r"Required AT_LEAST\((?P<n>\d+)\) occurrence of '(?P<key>[^']*)' but found (?P<m>\d+)"),
        lambda m: (m["key"], f"logged {m['m']} times (at least {m['n']} required)"),
    ),
    (
        re.compile(r"Required AT_LEAST_ONE occurrence of (?P<alts>'.*')\s*$"),
        lambda m: (" or ".join(re.findall(r"'([^']*)'", m["alts"])), "none logged (one of them required)"),
    ),
    (
        re.compile(r"Failed checks for (?P<key>\S+) : (?P<test>.*)", re.S),
        lambda m: (m["key"], f"no logged line meets {_cut(m['test'], MAX_TEST)}"),
    ),
    (re.compile(r"No log lines detected"), lambda m: ("", "no log lines the checker reads")),
]


def _key_of(full_line: str) -> str:
    m = re.search(r'"key":\s*"([^"]+)"', full_line) or re.search(r"^:::MLL\s+\S+\s+(\w+):", full_line.strip())
    return m.group(1) if m else ""


_MISSING_FILE = re.compile(r"Could not find config file: (?P<path>.*)")


def failure(message: str, file: str | None) -> Failure:
    """The short form of one checker message, raised while ``file`` was being checked. The checker quotes the
    log's values as its own JSON parser read them: a lone surrogate of an escape (``"\\udcff"``) is shown as
    that escape, as no report file could hold it."""
    text = str(message).encode("utf-8", "backslashreplace").decode("utf-8")
    m = _MISSING_FILE.match(text)
    if m:
        name = m["path"].strip().replace("\\", "/").rsplit("/", 1)[-1]
        return Failure(name, "", "no such rule file in the ruleset")
    for pattern, make in _FORMS:
        m = pattern.match(text)
        if m:
            key, what = make(m)
            return Failure(file or "", key, what)
    first = text.strip().splitlines()[0] if text.strip() else "(empty message)"
    return Failure(file or "", "", _cut(first, MAX_TEST + 40))


def summary(failures: list[Failure], limit: int = 3) -> str:
    """One short line for a run: its first failing rule, then how many more and which."""
    if not failures:
        return ""
    head = failures[0].line()
    rest = failures[1:]
    if not rest:
        return head
    names = ", ".join(f.key or f.file or "whole log" for f in rest[:limit])
    more = f", +{len(rest) - limit}" if len(rest) > limit else ""
    return f"{head} (+{len(rest)} more: {names}{more})"
