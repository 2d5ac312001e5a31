"""gpulab's on-host runner: ``python -m runner {run,probe,list}``.

Runs with no controller dependencies. The contract with the controller is the
command line and the run-directory files, documented in runner/README.md.
"""

__version__ = "0.1.0"

# The oldest PyTorch release the runner supports (pyproject's `runner` extra says the same):
# CI tests the runner on the release the stack profiles pin (2.13, CPU build), the GPU suite
# runs on 2.11 (CUDA 13.0). Inductor settings a release lacks are skipped with a note.
OLDEST_TORCH = "2.11"
