"""The one error a workload raises for a run it cannot do as asked (re-exported by runner.workloads.base)."""


class WorkloadError(Exception):
    """The workload cannot run as asked (missing data, unsupported setting)."""
