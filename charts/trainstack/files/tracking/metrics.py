"""The tracking server's Prometheus metrics on a port of their own (the chart's `tracking`;
docs/operations.md).

The server runs with `--expose-prometheus DIR`: MLflow's exporter (prometheus-flask-exporter) counts
every request (`mlflow_http_request_total` by method and status, `mlflow_http_request_duration_seconds`)
in prometheus-client's multiprocess files under DIR. MLflow serves them at its own `/metrics`, behind
its basic-auth app, where only the admin may read them. This sidecar serves the same files at
`/metrics` on METRICS_PORT without a login, for Prometheus; the NetworkPolicy admits only the
monitoring namespace to that port. Nothing in them names an experiment, a run or a user.

Standard library and the image's prometheus-client only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector


def main() -> int:
    folder = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    port = int(os.environ["METRICS_PORT"])
    os.makedirs(folder, exist_ok=True)  # the server may start after us; an empty folder serves nothing
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=folder)
    server, _thread = start_http_server(port, addr="0.0.0.0", registry=registry)
    print(f"{time.strftime('%H:%M:%S')} metrics: serving {folder} on :{port}/metrics", file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
