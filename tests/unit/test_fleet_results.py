"""lab.hosts.fleet.on_hosts: typed per-host results (Fabric's GroupResult) and Ctrl-C while it waits."""

import _thread
import signal
import threading
import time

import pytest

from lab.hosts import fleet
from lab.core.errors import HostError
from lab.hosts.inventory import Host


def host(name):
    return Host(
        name=name,
        address="192.0.2.1",
        port=22,
        user="root",
        connection="ssh",
        gpu_model="T4",
        gpu_count=1,
        stack="current",
        groups=("t4",),
        workdir="/var/lib/gpulab",
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
    )


def test_each_host_gives_its_value_or_its_error_in_host_order():
    def fn(h):
        if h.name == "b":
            raise HostError("b: unreachable")
        if h.name == "d":
            raise ValueError("odd answer")
        return h.name.upper()

    got = fleet.on_hosts([host(n) for n in "abcd"], fn)
    assert list(got) == ["a", "b", "c", "d"] and len(got) == 4
    assert got.succeeded == {"a": "A", "c": "C"}
    assert list(got.failed) == ["b", "d"] and isinstance(got.failed["b"], HostError)
    assert got["a"] == "A" and got["d"] is got.failed["d"]
    assert got.reasons() == {"b": "b: unreachable", "d": "ValueError: odd answer"}


@pytest.fixture
def sigint_as_in_a_terminal():
    """SIGINT raises KeyboardInterrupt, as for a user at a terminal. A shell that starts the tests in the
    background starts them with SIGINT ignored, and interrupt_main() then does nothing."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_while_waiting_cancels_the_hosts_not_started_and_raises_at_once(sigint_as_in_a_terminal):
    started, release = [], threading.Event()

    def fn(h):
        started.append(h.name)
        if h.name == "a":
            _thread.interrupt_main()  # what Ctrl-C does: KeyboardInterrupt in the waiting thread
            release.wait(10)
        return h.name

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fleet.on_hosts([host(n) for n in "abc"], fn, max_workers=1)
    assert time.monotonic() - t0 < 5  # it did not wait for the running call
    release.set()
    time.sleep(0.2)
    assert started == ["a"]  # b and c were never started
