"""Fault injection: SIGKILL a workload at the worst moments, reopen, check."""
