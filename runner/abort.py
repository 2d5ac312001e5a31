"""Stopping a workload process cleanly (no framework imports here).

The supervisor stops a run by sending SIGTERM to the process group of its
workload processes. Each process turns the first SIGTERM or SIGINT into an
``Aborted`` exception raised in the main thread, so that the training loop can
log ``run_stop`` with status aborted and the worker can report the outcome.
"""

from __future__ import annotations

import signal


class Aborted(Exception):
    """The run was stopped from outside (signal, time limit)."""


_state = {"aborting": False}


def _handler(signum, frame):
    if _state["aborting"]:
        return
    _state["aborting"] = True
    raise Aborted(f"stopped by {signal.Signals(signum).name}")


def install() -> None:
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def ignore() -> None:
    """After the abort has been handled: ignore further signals while cleaning up."""
    _state["aborting"] = True
