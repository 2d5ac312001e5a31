"""The fleet page read in ten seconds: `invoke history.page` opens with an overview (hosts x GPUs, each cell the
GPU's newest verdict; open quarantines with their action; checks trending down), then one section per host
and per GPU. A generated lab of 16 hosts x 8 GPUs is rendered and looked at in headless Chromium: the DOM as
rendered and a screenshot of its first screen, whose pixels must show the failing GPU's cell (FAIL red) and a
warning's (amber) without scrolling. ``python tests/unit/history/test_fleet_page.py OUT HOSTS`` writes the page
and its screenshot for a lab of HOSTS x 8 GPUs and prints the time it took."""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "report"))

from lab.history import db as hdb  # noqa: E402
from lab.history import page, quarantine  # noqa: E402
from lab.history.sources import CheckRecord, GpuRef, ValidationRecord  # noqa: E402
from lab.history.store import add_validation  # noqa: E402

T0 = dt.datetime(2026, 11, 1, 10, tzinfo=dt.timezone.utc)
FAIL_RGB, WARN_RGB = (196, 78, 82), (253, 233, 180)


def uuid(h: int, g: int) -> str:
    return f"GPU-{h:08x}-0000-4000-8000-{g:012x}"


def generate(url: str, hosts: int, gpus: int = 8, validates: int = 3) -> dict:
    """A lab's history: ``validates`` validates of every host; the last one fails GPU 3 of host 2 on a row
    remap, warns on GPU 5 of host 1 (a bandwidth trend), and the failing GPU is quarantined with its action."""
    names = [f"node-{h:02d}" for h in range(hosts)]
    db = hdb.open_db(url)
    try:
        for v in range(validates):
            at = T0 + dt.timedelta(days=v)
            last = v == validates - 1
            for h, name in enumerate(names):
                checks = [CheckRecord(host=name, name="GPU count", verdict="PASS", value=gpus, at=at)]
                for g in range(gpus):
                    ref = GpuRef(index=g, uuid=uuid(h, g), serial=f"1320{h:04d}{g:04d}", name="NVIDIA H100")
                    remap = last and (h, g) == (2, 3)
                    slow = last and (h, g) == (1, 5)
                    bw = 3000.0 + 10 * g + v - (600 if slow else 0)
                    checks += [
                        CheckRecord(
                            host=name,
                            name="memory bandwidth",
                            verdict="WARN" if slow else "PASS",
                            gpu=ref,
                            value=bw,
                            unit="GB/s",
                            at=at,
                        ),
                        CheckRecord(
                            host=name,
                            name="row remapping",
                            verdict="FAIL" if remap else "PASS",
                            gpu=ref,
                            value=1 if remap else 0,
                            reason="row remap failure: RMA" if remap else "none",
                            at=at,
                        ),
                    ]
                    if slow:
                        checks.append(
                            CheckRecord(
                                host=name,
                                name="memory bandwidth trend",
                                verdict="WARN",
                                gpu=ref,
                                value=bw,
                                unit="GB/s",
                                reason="17 % below its median of 3 points",
                                at=at,
                            )
                        )
                key = hashlib.sha256(f"{name}{v}".encode()).hexdigest()
                add_validation(
                    db,
                    ValidationRecord(
                        key=key,
                        source="validate.json",
                        at=at,
                        level="standard",
                        verdict="FAIL" if any(c.verdict == "FAIL" for c in checks) else "PASS",
                        checks=checks,
                    ),
                )
        quarantine.add(
            db,
            quarantine.Target(names[2], 3),
            reason="validate: row remapping: row remap failure",
            who="gpulab validate",
            action="rma: replace the GPU (keep: nvidia-bug-report)",
        )
    finally:
        db.close()
    return {"names": names}


def screenshot(html: Path, png: Path, tmp: Path, width=1280, height=900) -> None:
    from test_report_html_chromium import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--hide-scrollbars",
            f"--user-data-dir={tmp / 'profile'}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={"HOME": str(tmp), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]


def colour_rows(png: Path, rgb: tuple) -> list[int]:
    """The pixel rows of ``png`` that hold ``rgb`` (within 6 per channel)."""
    from PIL import Image

    img = Image.open(png).convert("RGB")
    w, h = img.size
    px = img.load()
    return [y for y in range(h) if any(all(abs(a - b) <= 6 for a, b in zip(px[x, y], rgb)) for x in range(0, w, 2))]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    url = f"sqlite:///{tmp / 'history.sqlite'}"
    info = generate(url, hosts=16)
    db = hdb.open_db(url)
    try:
        started = time.monotonic()
        out, drawn, found = page.write_page(db, tmp / "fleet.html")
        seconds = time.monotonic() - started
    finally:
        db.close()
    return tmp, out, drawn, found, seconds, info


def test_the_overview_comes_first_and_names_the_bad_gpus(fleet, tmp_path):
    from test_report_html_chromium import render

    tmp, out, drawn, found, seconds, info = fleet
    assert (drawn, found) == (256, 256)  # 16 hosts x 8 GPUs x 2 figures: none cut
    dom = render(out, tmp_path)
    grid = dom.tables["fleet"]
    assert [r["cells"][0] for r in grid[1:]] == info["names"]
    assert grid[0]["cells"] == ["host", "host checks", *(f"GPU {i}" for i in range(8))]
    assert grid[3]["cells"][2 + 3] == "FAIL row remapping FAIL"  # node-02 GPU 3: the row remap failure
    assert grid[2]["cells"][2 + 5].startswith("WARN memory bandwidth WARN")
    assert sum(c == "PASS" for r in grid[1:] for c in r["cells"][1:]) == 16 * 9 - 2
    (q,) = [r["cells"] for r in dom.tables["quarantines"][1:]]
    assert q[0] == "node-02 GPU 3" and q[4] == "rma: replace the GPU (keep: nvidia-bug-report)"
    (t,) = [r["cells"] for r in dom.tables["trending"][1:]]
    assert t[:4] == ["node-01", "5", "memory bandwidth trend", "WARN"]
    html = dom.html
    assert html.index('id="overview"') < html.index('id="host-node-00"') < html.index('id="host-node-15"')
    assert html.count('class="gpu"') == 128 and 'id="gpu-node-02-3-' in html


def test_the_first_screen_shows_the_failing_and_the_warning_gpu(fleet, tmp_path):
    tmp, out, *_ = fleet
    png = tmp_path / "fleet.png"
    screenshot(out, png, tmp_path)
    fail, warn = colour_rows(png, FAIL_RGB), colour_rows(png, WARN_RGB)
    assert fail and warn, "the overview's FAIL and WARN cells are not on the first screen"
    assert max(fail) < 900 and max(warn) < 900


def test_a_machine_without_gpu_history_is_told_what_to_do(tmp_path):
    db = hdb.open_db(f"sqlite:///{tmp_path / 'history.sqlite'}")
    try:
        out, drawn, found = page.write_page(db, tmp_path / "h.html")
    finally:
        db.close()
    text = " ".join(out.read_text().split())
    assert (drawn, found) == (0, 0) and 'id="no-gpu-history"' in text
    assert "No GPU has been checked yet" in text and "<code>invoke validate</code> records its verdicts" in text
    assert 'id="empty"' not in text  # not the import it may have just run


if __name__ == "__main__":  # the screenshots of the closing note, and the size the page was timed at
    dest, hosts = Path(sys.argv[1]), int(sys.argv[2])
    dest.mkdir(parents=True, exist_ok=True)
    work = dest / f"fleet-{hosts}x8"
    work.mkdir(exist_ok=True)
    url = f"sqlite:///{work / 'history.sqlite'}"
    (work / "history.sqlite").unlink(missing_ok=True)
    generate(url, hosts=hosts)
    database = hdb.open_db(url)
    started = time.monotonic()
    html, drawn, found = page.write_page(database, work / "fleet.html")
    print(
        f"{hosts} hosts x 8 GPUs: {found} series, {drawn} drawn, {time.monotonic() - started:.1f} s, "
        f"{html.stat().st_size / 1e6:.1f} MB"
    )
    database.close()
    screenshot(html, dest / f"fleet-page-{hosts}x8.png", work, height=1100)
