"""mlperf-logging's compliance checker, run on the text of a log already read.

Which ruleset
-------------
v0.6 logs (``:::MLL``)        training 0.6.0 (MiniGo by its own minigo.yaml, as
                              the 0.6.0 common rules say).
MLLOG logs (gpulab's runner,  training 0.7.0: the oldest MLLOG ruleset, the one
v0.7 on)                      gpulab's runner writes its logs for.
v0.5 logs (``:::MLPv0.5.0``)  none: mlperf-logging has no v0.5 ruleset (its
                              earliest is 0.6.0, and the 2018 mlperf_compliance
                              package ships no checker), so they are "not checked".
A benchmark that the ruleset does not list (NCF after v0.5) is not checked.

The checker runs in this process on the lines given (it never opens the file
and writes no compliance_checker.log); its log output is silenced. The verdict
is "PASS" or "FAIL" with the checker's first message, or None with the reason
it was not checked.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

RULESETS = {"v0.6": "0.6.0", "mllog": "0.7.0", "rundir": "0.7.0"}
_LISTED = {
    "0.6.0": ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "minigo"),
    "0.7.0": ("resnet", "ssd", "maskrcnn", "gnmt", "transformer", "minigo", "dlrm", "bert"),
}
_NONE_FOR = {"v0.5": "mlperf-logging has no v0.5 ruleset (its earliest is 0.6.0)"}


@dataclass(frozen=True)
class Verdict:
    status: str | None      # "PASS", "FAIL" or None (not checked)
    note: str
    ruleset: str | None = None


def ruleset_for(fmt: str, benchmark: str | None) -> tuple[str | None, str]:
    """(ruleset, why none)."""
    if fmt in _NONE_FOR:
        return None, _NONE_FOR[fmt]
    ruleset = RULESETS.get(fmt)
    if ruleset is None:
        return None, f"no compliance ruleset for {fmt} logs"
    if benchmark not in _LISTED[ruleset]:
        return None, f"mlperf-logging's training {ruleset} ruleset has no {benchmark or 'unnamed'} rules"
    return ruleset, ""


def check(text: str, fmt: str, benchmark: str | None) -> Verdict:
    """Run the checker of ``fmt``'s ruleset on ``text`` (the whole log)."""
    ruleset, why = ruleset_for(fmt, benchmark)
    if ruleset is None:
        return Verdict(None, why)
    lines = text.splitlines()
    try:
        from mlperf_logging.compliance_checker import mlp_compliance
        from mlperf_logging.compliance_checker.mlp_parser import ruleset_060, ruleset_070
    except ImportError as exc:      # pragma: no cover - a dependency of the project
        return Verdict(None, f"mlperf-logging not importable ({exc})")
    parser = ruleset_060 if ruleset == "0.6.0" else ruleset_070
    config = f"training_{ruleset}/" + ("minigo.yaml" if benchmark == "minigo" and ruleset == "0.6.0"
                                       else "common.yaml")
    checker = mlp_compliance.make_checker("training", ruleset, quiet=True, werror=False)
    with _quiet(), _rules_read_once(mlp_compliance):
        loglines, errors = parser.parse_generator(iter(lines))
        if errors:
            checker.put_message(f"{len(errors)} log line(s) the checker cannot parse, first: "
                                f"{errors[0][0][:120]!r}")
        try:
            del mlp_compliance.enqueued_configs[:]
            checker.check_loglines(loglines, config)
        except Exception as exc:   # the checker's own rule code failed on this log
            checker.put_message(f"the checker stopped: {type(exc).__name__}: {exc}")
        finally:
            del mlp_compliance.enqueued_configs[:]
    messages = [*checker.overwritable.values(), *checker.not_overwritable]
    if not messages:
        return Verdict("PASS", f"training {ruleset}", ruleset)
    first = " ".join(str(messages[0]).split())[:200]
    more = f" (+{len(messages) - 1} more)" if len(messages) > 1 else ""
    return Verdict("FAIL", f"training {ruleset}: {first}{more}", ruleset)


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
