"""`trainstack e2e`: smoke TrainJobs end to end on a real control plane (local, kind or existing)."""
