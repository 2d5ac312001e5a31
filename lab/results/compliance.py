"""mlperf-logging's compliance checker, run on the text of a log already read.

Which ruleset
-------------
v0.6 logs (``:::MLL``)        training 0.6.0 (MiniGo by its own minigo.yaml, as
                              the 0.6.0 common rules say).
MLLOG logs (v0.7 on)          training 0.7.0, the oldest MLLOG ruleset.
gpulab's own logs (run        gpulab's ruleset (lab/data/compliance.yml): training
directories; MLLOG whose      0.7.0, the one gpulab's runner writes its logs for,
submission_org is gpulab)     with the rules the v0.5 recipe cannot meet waived
                              (runner/README.md); the waivers a log needed are
                              listed with its verdict.
v0.5 logs (``:::MLPv0.5.0``)  none: mlperf-logging has no v0.5 ruleset (its
                              earliest is 0.6.0, and the 2018 mlperf_compliance
                              package ships no checker), so they are "not checked".
A benchmark that the ruleset does not list (NCF after v0.5) is not checked,
unless gpulab's exceptions name it.

A log of a published round named by its tree (lab.results.roundtree; v0.7 on) is
checked with that round's ruleset (lab/data/rounds.yml ``ruleset``), whatever its
benchmark, as mlperf-logging's result_summarizer checks each result file: with
``training_<ruleset>/common.yaml``, which picks the division's and benchmark's rules.

The checker runs in this process on the lines given (it never opens the file
and writes no compliance_checker.log); its log output is silenced. The lines
become the checker's log lines through the ruleset's own ``string_to_logline``,
each taken from its last marker (``:::MLLOG``) on, as the ruleset's parser takes
them (without its per-line regular expression, most of the checker's time). The verdict
is "PASS" or "FAIL", each failing rule in one short line (lab.results.checkmsg), or
None with the reason it was not checked.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lab.results import checkmsg

RULESETS = {"v0.6": "0.6.0", "mllog": "0.7.0", "rundir": "0.7.0"}
_LISTED = {
    "0.6.0": ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "minigo"),
    "0.7.0": ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "minigo", "dlrm", "bert"),
}
_NONE_FOR = {"v0.5": "mlperf-logging has no v0.5 ruleset (its earliest is 0.6.0)"}
DATA = Path(__file__).resolve().parents[1] / "data" / "compliance.yml"


@dataclass(frozen=True)
class Verdict:
    status: str | None  # "PASS", "FAIL" or None (not checked)
    note: str  # FAIL: the run's failing rules in one short line; else the ruleset or why none
    ruleset: str | None = None  # "training 0.6.0", "training 0.7.0 + gpulab exceptions"
    failures: tuple[str, ...] = ()  # one short line per failing rule
    waived: tuple[str, ...] = ()  # gpulab's exceptions the log needed: "why (waived: rules)"


@dataclass(frozen=True)
class Waiver:
    benchmarks: tuple[str, ...]
    rules: tuple[str, ...]
    why: str

    def covers(self, benchmark: str | None, failure: checkmsg.Failure) -> bool:
        if benchmark not in self.benchmarks:
            return False
        for rule in self.rules:
            file, _, key = rule.partition(" ")
            if fnmatch.fnmatchcase(failure.file, file) and (not key or key == failure.key):
                return True
        return False


@dataclass(frozen=True)
class GpulabRules:
    """gpulab's own logs' ruleset (lab/data/compliance.yml)."""

    ruleset: str
    source: str
    waivers: tuple[Waiver, ...]

    @property
    def name(self) -> str:
        return f"training {self.ruleset} + gpulab exceptions"

    def benchmarks(self) -> set[str]:
        return {b for w in self.waivers for b in w.benchmarks}


@lru_cache(maxsize=1)
def gpulab_rules() -> GpulabRules:
    from lab.core.schema import load_yaml

    doc = load_yaml(DATA, "compliance")
    return GpulabRules(
        doc["ruleset"],
        doc["source"],
        tuple(Waiver(tuple(e["benchmarks"]), tuple(e["rules"]), e["why"]) for e in doc["exceptions"]),
    )


def checker_version() -> str:
    """``mlperf-logging <version>``: the checker that judged."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"mlperf-logging {version('mlperf-logging')}"
    except PackageNotFoundError:  # pragma: no cover - a dependency of the project
        return "mlperf-logging (version unknown)"


_GPULAB_ORG = re.compile(r'"key":\s*"submission_org",\s*"value":\s*"gpulab"')


def gpulab_log(text: str, fmt: str) -> bool:
    """Written by gpulab's runner: a run directory, or an MLLOG file whose submission_org is gpulab."""
    return fmt == "rundir" or (fmt == "mllog" and _GPULAB_ORG.search(text[:20000]) is not None)


def ruleset_for(fmt: str, benchmark: str | None, gpulab: bool = False) -> tuple[str | None, str]:
    """(ruleset, why none); ``gpulab``: the log is gpulab's own (lab/data/compliance.yml)."""
    if fmt in _NONE_FOR:
        return None, _NONE_FOR[fmt]
    ruleset = RULESETS.get(fmt)
    if ruleset is None:
        return None, f"no compliance ruleset for {fmt} logs"
    if gpulab:
        ruleset = gpulab_rules().ruleset
        if benchmark in gpulab_rules().benchmarks():
            return ruleset, ""
    if benchmark not in _LISTED.get(ruleset, ()):
        return None, f"mlperf-logging's training {ruleset} ruleset has no {benchmark or 'unnamed'} rules"
    return ruleset, ""


def check(text: str, fmt: str, benchmark: str | None, ruleset: str | None = None) -> Verdict:
    """Run the checker on ``text`` (the whole log): with ``ruleset`` (a published round's, "4.0.0")
    whatever the benchmark, else with the ruleset of ``fmt`` (or of gpulab's own logs) where it
    lists the benchmark."""
    gpulab = ruleset is None and gpulab_log(text, fmt)
    if ruleset is None:
        ruleset, why = ruleset_for(fmt, benchmark, gpulab)
        if ruleset is None:
            return Verdict(None, why)
    try:
        from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        return Verdict(None, f"mlperf-logging not importable ({exc})")
    parser = getattr(mlp_parser, "ruleset_" + ruleset.replace(".", ""), None)
    if parser is None or not (Path(mlp_compliance.__file__).parent / f"training_{ruleset}").is_dir():
        return Verdict(None, f"{checker_version()} has no training {ruleset} ruleset")
    config = f"training_{ruleset}/" + ("minigo.yaml" if benchmark == "minigo" and ruleset == "0.6.0" else "common.yaml")
    checker = mlp_compliance.make_checker("training", ruleset, quiet=True, werror=False)
    raised_in = _record_rule_files(checker)
    with _quiet(), _rules_read_once(mlp_compliance):
        loglines, errors = _loglines(parser, text.splitlines())
        if errors:
            checker.put_message(f"{len(errors)} log line(s) the checker cannot parse, first: {errors[0][0][:120]!r}")
        try:
            del mlp_compliance.enqueued_configs[:]
            checker.check_loglines(loglines, config)
        except Exception as exc:  # the checker's own rule code failed on this log
            checker.put_message(f"the checker stopped: {type(exc).__name__}: {exc}")
        finally:
            del mlp_compliance.enqueued_configs[:]
    messages = [*checker.overwritable.values(), *checker.not_overwritable]
    failures = [checkmsg.failure(m, raised_in.get(id(m))) for m in messages]
    name = f"training {ruleset}"
    waived = []
    if gpulab:
        rules = gpulab_rules()
        name = rules.name
        kept, used = [], {}
        for f in failures:
            waiver = next((w for w in rules.waivers if w.covers(benchmark, f)), None)
            if waiver is None:
                kept.append(f)
            else:
                used.setdefault(waiver.why, []).append(f.rule)
        failures = kept
        waived = [f"{why} (waived: {', '.join(dict.fromkeys(names))})" for why, names in used.items()]
    if not failures:
        return Verdict("PASS", name, name, waived=tuple(waived))
    lines = tuple(f.line() for f in failures)
    return Verdict("FAIL", checkmsg.summary(failures), name, lines, tuple(waived))


def _loglines(parser, lines: list[str]) -> tuple[list, list]:
    """(log lines, [(line, error)]) as the ruleset's parse_generator gives them, each numbered by
    its line in the file, so that a failing rule's "line N" is where a reader finds it."""
    token = parser.TOKEN
    out, failed = [], []
    for number, line in enumerate(lines, 1):
        k = line.rfind(token)
        if k < 0:
            continue
        line = (token + line[k + len(token) :]).strip()
        try:  # numbered by the file's line (the checker's own count starts at 0 among its lines)
            out.append(parser.string_to_logline(number, line))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # the parser's: ValueError
            failed.append((line, str(exc)))
    return out, failed


def _record_rule_files(checker) -> dict[int, str]:
    """Which rule file each of ``checker``'s messages was raised in: the checker keeps only
    the text, so its ``put_message`` and ``configured_checks`` are wrapped on this instance.
    A rule file the ruleset lacks (the checker says so, then cannot open it) is skipped."""
    raised_in: dict[int, str] = {}
    current = [""]
    put, configured = checker.put_message, checker.configured_checks

    def put_message(msg, key=None):
        raised_in[id(msg)] = current[0]
        put(msg, key)

    def configured_checks(loglines, config_file):
        current[0] = os.path.basename(config_file)
        if os.path.exists(config_file):
            configured(loglines, config_file)

    checker.put_message, checker.configured_checks = put_message, configured_checks
    return raised_in


class _RuleFiles:
    """Stands in for the checker's ``yaml`` module: each rule file is parsed once per process
    (parsing them is most of the checker's time; the checker only reads the result)."""

    cache: dict[str, object] = {}

    def __init__(self, yaml):
        self._yaml = yaml
        self.BaseLoader = yaml.BaseLoader

    def load(self, stream, Loader):
        key = getattr(stream, "name", None)
        if key is None:
            return self._yaml.load(stream, Loader=Loader)
        if key not in self.cache:
            self.cache[key] = self._yaml.load(stream, Loader=Loader)
        return self.cache[key]


@contextmanager
def _rules_read_once(module):
    real = module.yaml
    module.yaml = _RuleFiles(real)
    try:
        yield
    finally:
        module.yaml = real


@contextmanager
def _quiet():
    """The checker logs through the root logger and prints scores: keep both out of the report."""
    import contextlib
    import io

    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(previous)
