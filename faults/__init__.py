"""The model of a failure-injection run: scenario, catalog, schedules, workload, history,
checker, report, and the one runner that drives a scenario over a backend."""
