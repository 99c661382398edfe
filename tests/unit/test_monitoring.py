"""Metrics, alerts and the dashboard, held to the real metrics of the pinned controllers.

Metric names come from the pinned upstream sources (module zips verified against the lock and
the controllers' go.sum); the rules are checked and unit-tested with the pinned promtool; the
chart wires metrics only when asked, and the ServiceMonitors only where the Prometheus Operator is.
"""

from __future__ import annotations

from trainstack import monitoring


# ----------------------------------------------------------------------------- the scanner (no network)
def test_scanner_reads_opts_constants_descs_and_histogram_series():
    files = {
        "pkg/constants/c.go": 'package constants\nconst (\n\tSubsystem = "jobset"\n)\n',
        "pkg/metrics/m.go": '''package metrics
const WorkQueueSubsystem = metrics.WorkQueueSubsystem
var failed = prometheus.NewCounterVec(
	prometheus.CounterOpts{
		Subsystem: constants.Subsystem,
		Name:      "failed_total",
		ConstLabels: prometheus.Labels{"Name": "ignored"},
	}, []string{"jobset_name"})
var latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Subsystem: WorkQueueSubsystem, Name: DepthKey, Buckets: []float64{1, 2},
}, nil)
var opts = prometheus.GaugeOpts{Name: "probe_thing_seconds"}
var d = prometheus.NewDesc(ns+"process_cpu_seconds_total", "help", nil, nil)
''',
        "pkg/lib/metrics/keys.go":
            'package metrics\nconst (\n\tWorkQueueSubsystem = "workqueue"\n\tDepthKey = "depth"\n)\n',
    }
    names = monitoring.scan_go(files, "example@v1").names
    assert {"jobset_failed_total", "workqueue_depth", "workqueue_depth_bucket", "workqueue_depth_sum",
            "workqueue_depth_count", "probe_thing_seconds", "process_cpu_seconds_total"} <= set(names)
    assert names["jobset_failed_total"] == "example@v1/pkg/metrics/m.go"
    assert "jobset_ignored" not in names and "ignored" not in names


def test_promql_metric_names_skips_functions_labels_keywords_and_grafana_variables():
    expr = ('sum by (namespace, job) (rate(controller_runtime_reconcile_errors_total{job=~"a|b", code!="200"}[5m]))'
            ' / on (job) group_left (pod) max without (le) (up offset 1h) > bool 0.5'
            ' or histogram_quantile(0.99, rate(x_bucket[$__rate_interval])) unless absent(kube_pod_info)'
            ' and {__name__="raw_name"}')
    assert monitoring.promql_metric_names(expr) == {
        "controller_runtime_reconcile_errors_total", "up", "x_bucket", "kube_pod_info", "raw_name"}


def test_exposition_parser_reads_names_from_type_lines_and_samples():
    text = ("# HELP jobset_failed_total The total number of failed JobSets\n# TYPE jobset_failed_total counter\n"
            'workqueue_depth{name="jobset"} 0\nup 1\n')
    assert monitoring.parse_exposition(text) == {"jobset_failed_total", "workqueue_depth", "up"}


def test_python_exporter_scan_reads_prefixed_definitions_with_their_series():
    # the shapes prometheus-flask-exporter's export_defaults uses (format strings with the prefix)
    source = '''
        self.info('%sexporter_info' % prefix, 'Information', version=self.version)
        request_duration_metric = Histogram(
            '%shttp_request_duration_seconds' % prefix, 'Flask HTTP request duration in seconds',
            ('method', 'status'), registry=self.registry)
        request_total_metric = Counter('%shttp_request_total' % prefix, 'Total', counter_labels)
        other = Gauge('fixed_name', 'not prefixed: not a default metric')
    '''
    names = monitoring.scan_python_exporter(source, "mlflow", "pfe/__init__.py")
    assert set(names) == {"mlflow_exporter_info", "mlflow_http_request_total", "mlflow_http_request_duration_seconds",
                          "mlflow_http_request_duration_seconds_bucket", "mlflow_http_request_duration_seconds_sum",
                          "mlflow_http_request_duration_seconds_count"}
    assert set(names.values()) == {"pfe/__init__.py"}


def test_a_failed_scrape_carries_the_http_status_not_just_its_wording():
    import urllib.error

    url = "https://127.0.0.1:33401/metrics"  # a port with "401" in it: the status comes from the answer
    forbidden = monitoring.ScrapeError(url, urllib.error.HTTPError(url, 403, "Forbidden", {}, None))
    assert forbidden.status == 403 and forbidden.exit_code == 1
    refused = monitoring.ScrapeError(url, ConnectionRefusedError(111, "Connection refused"))
    assert refused.status is None
