"""Built-in benchmarks. Framework code is imported only inside the implementation that needs it."""

from kaliper.benchmarks.catalog import WORKLOADS, WorkloadDef, get_workload

__all__ = ["WORKLOADS", "WorkloadDef", "get_workload"]
