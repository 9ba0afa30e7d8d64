"""Pure functions over RunRecords: the record schema and IO, metrics, statistics, queueing models."""

from analysis.records import RunRecord, load_runs, read_run, write_run

__all__ = ["RunRecord", "load_runs", "read_run", "write_run"]
