"""`trainstack convert`: Training Operator v1 jobs to TrainJobs on the golden runtimes."""
