"""The inventory's templated values, rendered with a time and a memory bound.

A gpulab_* or connection variable may be a Jinja template (``/home/{{ ansible_user }}/gpulab``), which
gpulab renders as Ansible would before it checks the value. Jinja is a language: ``{{ 'x' * 10**10 }}`` asks
for 10 GB, ``{{ range(10**9) | list }}`` for more, a nested loop for hours, and the template is rendered while
a command's input is checked, before anything runs. ``render`` therefore renders in a forked child with an
address-space and CPU-time limit and a wall-clock deadline, and reads back at most ``MAX_OUTPUT`` bytes: a
template past any of them is a ``Refused`` with a one-line reason, and the controller goes on unharmed.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import time
from typing import Any, Callable

SECONDS = 10  # the whole rendering of one host's templated values, wall clock and CPU
MEMORY = 512 << 20  # address space the child may add to the controller's
MAX_OUTPUT = 1 << 20  # the rendered values, as JSON


class Refused(Exception):
    """A rendering that did not finish within the bounds; ``reason`` is one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _address_space() -> int | None:
    """This process's address space in bytes (Linux /proc), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _child(write_fd: int, render_one: Callable[[str], Any], values: dict[str, str]) -> None:
    """In the forked child: limits set, each value rendered ('ok', value) or ('error', why), JSON to the pipe."""
    for kind, more in ((resource.RLIMIT_AS, _address_space()), (resource.RLIMIT_CPU, 0)):
        if more is not None:
            hard = resource.getrlimit(kind)[1]
            want = more + (MEMORY if kind == resource.RLIMIT_AS else SECONDS)
            resource.setrlimit(kind, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    out = {}
    for key, text in values.items():
        try:
            out[key] = ["ok", render_one(text)]
        except MemoryError:
            out[key] = ["error", f"needs more than {MEMORY >> 20} MB to render"]
        except Exception as exc:  # undefined variable, a Jinja error, ...: Ansible's message
            out[key] = ["error", " ".join(str(exc).split())]
    data = json.dumps(out, default=str).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(write_fd, view[: 1 << 16]) :]


def render(render_one: Callable[[str], Any], values: dict[str, str]) -> dict[str, tuple[str, Any]]:
    """{key: ('ok', rendered value) or ('error', reason)} of ``values`` rendered by ``render_one``, in a child
    process within SECONDS, MEMORY and MAX_OUTPUT; Refused when the child does not finish within them."""
    if not values:
        return {}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; it never returns
        code = 0
        try:
            os.close(read_fd)
            _child(write_fd, render_one, values)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    data, too_big, deadline = bytearray(), False, time.monotonic() + SECONDS + 2
    with selectors.DefaultSelector() as sel:
        sel.register(read_fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_OUTPUT:
                too_big = True
                break
        else:
            too_big = None  # the deadline passed
    os.close(read_fd)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _, status = os.waitpid(pid, 0)
    if too_big is None:
        raise Refused(f"takes more than {SECONDS} s to render")
    if too_big:
        raise Refused(f"renders to more than {MAX_OUTPUT >> 10} KB")
    try:
        return {k: (v[0], v[1]) for k, v in json.loads(bytes(data)).items()}
    except (ValueError, AttributeError, IndexError, TypeError):
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
            raise Refused(f"takes more than {SECONDS} s of CPU to render") from None
        raise Refused(f"its rendering failed (at most {SECONDS} s and {MEMORY >> 20} MB)") from None
