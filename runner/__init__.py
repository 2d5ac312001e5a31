"""gpulab's on-host runner: ``python -m runner {run,probe,list}``.

Runs with no controller dependencies. The contract with the controller is the
command line and the run-directory files, documented in runner/README.md.
"""

__version__ = "0.1.0"
