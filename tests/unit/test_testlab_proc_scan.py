"""The test lab's scans of /proc: a process that exits between the listing of /proc and the read of its files
counts as gone (other work runs on the same machine, so this happens)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

from tests.testlab import lab
from tests.testlab.util import proc_start_time


def test_a_scan_of_proc_skips_a_process_that_vanished_after_the_listing(monkeypatch):
    marker = f"gpulab-scan-{secrets.token_hex(4)}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        # The scan must see the live child first; on a loaded machine that may take a moment (a CI run once saw
        # an empty scan right after the start), so wait for it within a bound, and say so if the child died.
        deadline = time.monotonic() + 30
        while lab.pids_mentioning(marker) != [child.pid] and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, f"the child exited early with {child.returncode}"
        assert lab.pids_mentioning(marker) == [child.pid]
        listed = os.listdir("/proc")                  # the listing still names the child ...
    finally:
        child.kill()
        child.wait()                                  # ... which is gone (reaped) before its files are read
    assert str(child.pid) in listed and not os.path.exists(f"/proc/{child.pid}")
    monkeypatch.setattr(lab.os, "listdir", lambda path: listed)
    assert lab.pids_mentioning(marker) == []
    assert lab._cmdline(child.pid) == "" and proc_start_time(child.pid) is None
