"""The one exception family of the controller.

Every error a user can cause or meet is one of these, carries a one-line
message that names the file, host or value at fault, and maps to an exit code:
2 for bad input (nothing was touched), 1 for a failed run or check.
tasks.py turns them into ``invoke.Exit``; nothing else prints tracebacks.
"""


class GpulabError(Exception):
    """Base class. ``exit_code`` is what the invoke task exits with."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line

    @property
    def message(self) -> str:
        return self.args[0]


class ConfigError(GpulabError):
    """Bad input: inventory, stack file, reference data, CLI value, log file."""

    exit_code = 2


class HostError(GpulabError):
    """A host cannot be reached or refused us (host key, auth) before any change."""

    exit_code = 2


class HostCommandError(HostError):
    """A host answered, but a command of its misbehaved there and was stopped (printed past gpulab's cap,
    lab.hosts.capped): not a host that cannot be reached."""


class RunError(GpulabError):
    """A run, a playbook or a sweep failed after it started."""

    exit_code = 1


class CheckFailed(GpulabError):
    """A check (audit drift, validation verdict) did not pass."""

    exit_code = 1


def one_line(exc: BaseException) -> str:
    """The one line a caller reports for ``exc``: a GpulabError's message, else its type and text."""
    return exc.message if isinstance(exc, GpulabError) else f"{type(exc).__name__}: {exc}"


def about(name: str, message: str) -> str:
    """``message`` said of host ``name``: prefixed with ``name: `` unless it names the host already (a host's
    errors start with ``name:`` or ``name (address):``), so that the host is named once."""
    if message.startswith((f"{name}:", f"{name} (")):
        return message
    return f"{name}: {message}"


def nothing_read(what: str, skipped: list[str]) -> ConfigError:
    """The refusal of a command that found inputs but could use none of them: ``what``, the first skip and
    how many more (``skipped``: one line each, at least one)."""
    more = f" (and {len(skipped) - 1} more skipped)" if len(skipped) > 1 else ""
    return ConfigError(f"{what}: {skipped[0]}{more}")


EXCERPT = 80


def excerpt(text, limit: int = EXCERPT) -> str:
    """At most ``limit`` characters of ``text`` on one line: an error quotes a value or a file, never all of it."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def line_of(text, limit: int = EXCERPT) -> str:
    """What another program or a file said, as one line of an error or a table: whitespace runs one space,
    control characters shown escaped (``printable``), at most ``limit`` characters."""
    return excerpt(printable(" ".join(str(text).split())), limit)


def shown(value, limit: int = 60) -> str:
    """A refused value of a data file in an error line: an excerpt of its repr where it is text, a number or
    null, else its kind; a list or mapping (a YAML alias bomb among them) is never turned into text."""
    if isinstance(value, (str, int, float)) or value is None:
        if isinstance(value, str) and len(value) > 4 * limit:
            value = value[: 4 * limit]
        return excerpt(repr(value), limit)
    return "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, (list, tuple)) else "not text"


def printable(text) -> str:
    """``text`` for a terminal: control characters (an escape sequence's ESC among them) and text that is not
    valid UTF-8 (a lone surrogate of a non-UTF-8 file name) shown as \\x.. / \\udc.., never sent raw."""
    text = str(text)
    return text if text.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
