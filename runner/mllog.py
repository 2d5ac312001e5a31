"""MLLOG events through the mlperf-logging package.

Only rank 0 writes: other ranks get a logger whose calls do nothing. The
lines are ``:::MLLOG {json}`` as mlperf-logging encodes them, appended to the
run directory's ``mllog.log`` and flushed after every event so that an
aborted run keeps everything it logged.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from mlperf_logging.mllog import constants
from mlperf_logging.mllog.mllog import MLLogger as _MLLogger

from runner import boundjson, rundir

SUBMISSION_ORG = "gpulab"
SCALE_KEY = "gpulab_scale"  # tiny, small or full: logged right after the submission keys


def division_of(scale: str, mode: str, reference_recipe: bool = True) -> str:
    """MLPerf division a run's MLLOG claims: ``closed`` only for a full-scale ttt run
    of a workload whose full scale is the v0.5 reference recipe."""
    return "closed" if scale == "full" and mode == "ttt" and reference_recipe else "open"


class _FlushingHandler(logging.FileHandler):
    def _open(self):  # the log file is opened without following a link planted at its name
        return rundir.open_file(
            self.baseFilename, append=self.mode.startswith("a"), encoding=self.encoding, errors=self.errors
        )

    def emit(self, record):
        super().emit(record)
        self.flush()
        try:
            os.fsync(self.stream.fileno())
        except OSError:
            pass


class MLLog:
    """Thin wrapper: ``event``/``start``/``end`` as in mlperf-logging."""

    def __init__(self, path: Path | None, enabled: bool = True):
        self.enabled = bool(enabled and path is not None)
        self.path = Path(path) if path is not None else None
        self._handler = None
        if self.enabled:
            logger = logging.getLogger(f"gpulab.mllog.{id(self)}")
            logger.propagate = False
            logger.setLevel(logging.INFO)
            self._handler = _FlushingHandler(self.path, mode="a", encoding="utf-8")
            self._handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(self._handler)
            # stack offset 2: the caller of event()/start()/end(), not this module
            self._log = _MLLogger(logger=logger, default_stack_offset=2)
        self.run_stopped = False

    def event(self, key, value=None, metadata=None):
        if self.enabled:
            self._log.event(key=key, value=value, metadata=metadata)

    def start(self, key, value=None, metadata=None):
        if self.enabled:
            self._log.start(key=key, value=value, metadata=metadata)

    def end(self, key, value=None, metadata=None):
        if self.enabled:
            if key == constants.RUN_STOP:
                self.run_stopped = True
            self._log.end(key=key, value=value, metadata=metadata)

    def close(self):
        if self._handler is not None:
            self._handler.close()
            logging.getLogger(f"gpulab.mllog.{id(self)}").removeHandler(self._handler)
            self._handler = None
            self.enabled = False

    # --- groups of events every workload logs ---------------------------------

    def submission(
        self,
        benchmark: str,
        platform: str,
        scale: str,
        mode: str,
        status: str = "onprem",
        reference_recipe: bool = True,
    ) -> None:
        """The submission keys, and which gpulab scale and mode the run is.

        Only a ``full`` scale time-to-train run (the MLPerf v0.5 recipe on the
        real data set) logs the closed division; tiny and small scales (test
        models on generated data) and throughput runs (synthetic batches, no
        quality target) log ``open`` and say which scale they are in
        ``gpulab_scale`` (metadata: ``mode``, and ``note`` for test scales).
        A workload whose full scale is not the reference recipe
        (``reference_recipe=False``: the TensorFlow ResNet-50) logs ``open``
        at every scale.
        """
        self.event(constants.SUBMISSION_BENCHMARK, benchmark)
        self.event(constants.SUBMISSION_ORG, SUBMISSION_ORG)
        self.event(constants.SUBMISSION_DIVISION, division_of(scale, mode, reference_recipe))
        self.event(constants.SUBMISSION_STATUS, status)
        self.event(constants.SUBMISSION_PLATFORM, platform)
        meta = {"mode": mode}
        if scale != "full":
            meta["note"] = f"{scale} is a test scale (generated data, reduced model): not an MLPerf result"
        self.event(SCALE_KEY, scale, metadata=meta)

    def hyperparameters(self, params: dict) -> None:
        for key, value in params.items():
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
                self.event(key, value[0], metadata=value[1])
            else:
                self.event(key, value)


def platform_name(world_size: int, device_name: str | None) -> str:
    """``2xH200@host`` style platform string (``cpu`` without a GPU)."""
    dev = (device_name or "cpu").replace("NVIDIA ", "").replace(" ", "_")
    return f"{world_size}x{dev}@{socket.gethostname()}"


def has_run_stop(path: Path) -> bool:
    """Whether an MLLOG file already holds a run_stop event."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith(":::MLLOG "):
            try:
                event = boundjson.loads(line[9:])
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("key") == constants.RUN_STOP:
                return True
    return False


def has_run_start(path: Path) -> bool:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return '"key": "run_start"' in text


def close_aborted(path: Path, reason: str) -> None:
    """Append ``run_stop`` with status aborted to a log whose run started but never stopped.

    Used by the supervisor when a workload process was killed before it could
    log its own end.
    """
    if not has_run_start(path) or has_run_stop(path):
        return
    log = MLLog(path)
    try:
        log.end(constants.RUN_STOP, metadata={"status": constants.ABORTED, "reason": reason})
    finally:
        log.close()
