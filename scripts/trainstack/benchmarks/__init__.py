"""Every benchmark of trainstack, in one place (`trainstack bench [PART ...]`, results in
bench/results/<part>.json):

- command: the `bench` command; its parts register there by name as "module:function";
- validate: `trainstack validate` against kubeconform and kubectl-validate on a generated corpus
  (validate_corpus: the corpus, its documents broken on purpose);
- e2e: the warm time of `make e2e` with the local provider (and, with --cold, the binaries' build);
- gitops: the warm time of `make e2e-gitops` and Argo CD's build time;
- tests: `make test` per tier on a fresh clone (only when named: it runs the whole suite);
- scale: TrainJobs against raw JobSets and raw Jobs on KWOK GPU nodes (scale_workloads: the mix;
  scale_watch and scale_meter: what is collected and measured; scale_run: one size, three paths;
  scale_report: the picture and tables).

The benchmarks stand on the testbed (e2e suites, the local provider); nothing outside this package
imports it except the CLI's command list.
"""
