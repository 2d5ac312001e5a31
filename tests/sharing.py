"""Two or more pytest processes share one session (``pytest --processes N``; the crash guard starts them).

Each process (a child of the crash guard, ``tests/crashguard.py``) collects the whole session, then
runs whole test files that it claims one at a time: the first process to create a file's claim (an
empty file named after it in a folder the guard gives, created with O_EXCL) runs every test of that
file, so module fixtures are made once and a file's tests keep their order. The test lab's files
(a test that uses the ``testlab``, ``testlab_images`` or ``slurmlab`` fixture or is marked ``lab``)
are claimed by process 1 alone, first: no two labs (network namespaces, SSH hosts, Ansible runs) are
built at once and the lab walks never compete with each other for the cores. Files marked
``checkout`` (they compare the whole checkout before and after) are process 1's too, after the
lab's: the lab's tests write artifacts/ and results/ into the checkout, never beside them.
Process 1 takes ordinary files once its own are done. A process started again after a crash (the guard's
resume) first finishes the files its process number had claimed. Each process writes its own JUnit
XML (``--junitxml``); the guard merges them into the file asked for (``merge_junit``).
"""

from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

CLAIMS = "GPULAB_CRASHGUARD_CLAIMS"  # the claims folder of a shared session
SLOT = "GPULAB_CRASHGUARD_SLOT"  # this process's number, 1..N
XML = "GPULAB_CRASHGUARD_XML"  # where this process writes its JUnit XML
LAB_FIXTURES = frozenset({"testlab", "testlab_images", "slurmlab"})


def is_lab(item) -> bool:
    """A test of the SSH test lab: it uses the lab's fixtures (directly or through another fixture) or is
    marked ``lab``."""
    return item.get_closest_marker("lab") is not None or bool(LAB_FIXTURES & set(getattr(item, "fixturenames", ())))


def watches_checkout(item) -> bool:
    return item.get_closest_marker("checkout") is not None


def file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


class Sharer:
    """The child's plugin: the session's loop over the files this process claims."""

    def __init__(self, claims: Path, slot: int):
        self.claims, self.slot = claims, slot

    def _path(self, key: str) -> Path:
        return self.claims / hashlib.sha256(key.encode()).hexdigest()

    def owner(self, key: str) -> int | None:
        try:
            return int(self._path(key).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None

    def claim(self, key: str) -> bool:
        try:
            fd = os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(str(self.slot))
        return True

    def order(self, files: dict[str, list]) -> list[str]:
        """The files this process asks for, in order: those its number already holds (a resumed process),
        then for process 1 the lab's files, those that watch the checkout and then the others, for the
        others the others."""
        lab = [k for k, items in files.items() if any(is_lab(i) for i in items)]
        watch = [k for k, items in files.items() if k not in lab and any(watches_checkout(i) for i in items)]
        rest = [k for k in files if k not in lab and k not in watch]
        held = [k for k in files if self.owner(k) == self.slot]
        wanted = (lab + watch + rest) if self.slot == 1 else rest
        return held + [k for k in wanted if k not in held]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        """pytest's own loop (main.py), over the claimed files only; ``nextitem`` is the first test of the
        next claimed file, so module and session fixtures are torn down as in one process."""
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            n = session.testsfailed
            raise session.Interrupted(f"{n} error{'s' if n != 1 else ''} during collection")
        if session.config.option.collectonly:
            return True
        files: dict[str, list] = {}
        for item in session.items:
            files.setdefault(file_of(item), []).append(item)
        queue = self.order(files)
        held = {k for k in queue if self.owner(k) == self.slot}

        def next_file() -> str | None:
            while queue:
                key = queue.pop(0)
                if key in held or self.claim(key):
                    return key
            return None

        current = next_file()
        while current is not None:
            items, following = files[current], None
            for i, item in enumerate(items):
                if i + 1 < len(items):
                    nextitem = items[i + 1]
                else:  # claimed before the last test ends: its teardown knows what comes next
                    following = next_file()
                    nextitem = files[following][0] if following else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                if session.shouldfail:
                    raise session.Failed(session.shouldfail)
                if session.shouldstop:
                    raise session.Interrupted(session.shouldstop)
            current = following
        return True


def start_child(config) -> None:
    """In a child of a shared session: take this process's number, claims and XML path (popped, so that a
    pytest a test starts is a session of its own)."""
    claims, slot, xml = os.environ.pop(CLAIMS, None), os.environ.pop(SLOT, None), os.environ.pop(XML, None)
    if xml and getattr(config.option, "xmlpath", None):
        config.option.xmlpath = xml
    if claims and slot:
        config.pluginmanager.register(Sharer(Path(claims), int(slot)), "gpulab-crashguard-sharer")


def merge_junit(target: Path, parts: list[Path], seconds: float) -> None:
    """The processes' JUnit XML files as one (their test cases in one test suite, the counts added up,
    the wall time of the whole session); the parts are removed."""
    trees = [ET.parse(p) for p in parts if p.is_file()]
    if trees:
        suites = [t.getroot() if t.getroot().tag == "testsuite" else t.getroot().find("testsuite") for t in trees]
        first = suites[0]
        for other in suites[1:]:
            for case in other.findall("testcase"):
                first.append(case)
            for key in ("tests", "errors", "failures", "skipped"):
                first.set(key, str(int(first.get(key, "0")) + int(other.get(key, "0"))))
        first.set("time", f"{seconds:.3f}")
        trees[0].write(target, encoding="utf-8", xml_declaration=True)
    for p in parts:
        p.unlink(missing_ok=True)
