"""The test lab's scans of /proc: a process that exits between the listing of /proc and the read of its files
counts as gone (other work runs on the same machine, so this happens)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from tests.testlab import lab
from tests.testlab.util import exec_done, proc_start_time


def test_a_scan_of_proc_skips_a_process_that_vanished_after_the_listing(monkeypatch):
    marker = f"gpulab-scan-{secrets.token_hex(4)}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        exec_done(child)  # Popen returns before /proc shows its command line
        assert lab.pids_mentioning(marker) == [child.pid]
        listed = os.listdir("/proc")  # the listing still names the child ...
    finally:
        child.kill()
        child.wait()  # ... which is gone (reaped) before its files are read
    assert str(child.pid) in listed and not os.path.exists(f"/proc/{child.pid}")
    monkeypatch.setattr(lab.os, "listdir", lambda path: listed)
    assert lab.pids_mentioning(marker) == []
    assert lab._cmdline(child.pid) == "" and proc_start_time(child.pid) is None
