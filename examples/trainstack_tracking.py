"""The run in MLflow of an example training script (train_ddp.py, train_jax.py, train_xgboost.py).

One process logs (rank 0), and only where the platform configured tracking: with the chart's
tracking on, the golden runtimes set MLFLOW_TRACKING_URI, the namespace's credential
(MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD), MLFLOW_EXPERIMENT_NAME (the namespace) and
MLFLOW_RUN_NAME (the TrainJob's name). Tracking never stops training: no MLflow installed, a
server that is down or a refusal prints one "tracking" line with the error, and the script trains
on untracked. Metrics are kept and sent in batches (one request per FLUSH metrics, and at the end),
so a fast loop never waits for the server and a failing job ends at once.

    with Tracker(rank == 0) as tracker:          # FAILED if the block raises, else FINISHED
        tracker.params(vars(args))
        tracker.metric("loss", loss, step)
        tracker.metrics({"final_loss": loss})
        tracker.artifact(path, "checkpoint")

The example scripts import it from their own directory: the SDK example (sdk_submit.py) and the
pipeline's training step ship it beside the script. Kept free of shell-special characters (dollar,
backquote, backslash) for the same reason as the scripts: the SDK ships its text in a shell
here-document.
"""

from __future__ import annotations

import json
import os
import socket
import time


def _say(record: dict) -> None:
    print(json.dumps(record, sort_keys=True), flush=True)


def _wait_for_server(uri: str, seconds: float = 5.0) -> None:
    """Until the tracking server accepts a connection, at most SECONDS (then MLflow's own retries apply).

    A pod's first moments: a NetworkPolicy enforcer admits a new pod once it has seen the pod's address,
    and MLflow's client waits longer after each refused connection (4 s, then 8 s, ...)."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((parts.hostname, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)


class Tracker:
    FLUSH = 200

    def __init__(self, active: bool = True) -> None:
        self.mlflow = None
        self.run = None
        self.pending: list = []
        self.ended = False
        if not active or not os.environ.get("MLFLOW_TRACKING_URI"):
            return
        try:
            import mlflow

            _wait_for_server(os.environ["MLFLOW_TRACKING_URI"])
            mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default")
            self.run = mlflow.start_run(run_name=os.environ.get("MLFLOW_RUN_NAME") or None)
            self.mlflow = mlflow
            _say({"event": "tracking", "ok": True, "run_id": self.run.info.run_id,
                  "experiment_id": self.run.info.experiment_id, "uri": mlflow.get_tracking_uri()})
        except Exception as err:  # noqa: BLE001 (tracking must never stop training)
            self._failed(err)

    @property
    def active(self) -> bool:
        """Whether this process logs: worth computing a value only to log it."""
        return self.mlflow is not None

    def _failed(self, err: Exception) -> None:
        self.mlflow = None
        _say({"event": "tracking", "ok": False, "error": f"{type(err).__name__}: {str(err)[:300]}"})

    def _call(self, method: str, *args: object, **kwargs: object) -> None:
        if self.mlflow is not None:
            try:
                getattr(self.mlflow, method)(*args, **kwargs)
            except Exception as err:  # noqa: BLE001
                self._failed(err)

    def params(self, values: dict) -> None:
        self._call("log_params", values)

    def metric(self, key: str, value: float, step: int) -> None:
        if self.mlflow is not None:
            self.pending.append(self.mlflow.entities.Metric(key, float(value), int(time.time() * 1000), int(step)))
            if len(self.pending) >= self.FLUSH:
                self.flush()

    def metrics(self, values: dict) -> None:
        self.flush()
        self._call("log_metrics", {k: float(v) for k, v in values.items()})

    def artifact(self, path: str, directory: str | None = None) -> None:
        self._call("log_artifact", str(path), directory)

    def flush(self) -> None:
        if self.mlflow is not None and self.pending:
            batch, self.pending = self.pending, []
            try:
                self.mlflow.MlflowClient().log_batch(self.run.info.run_id, metrics=batch)
            except Exception as err:  # noqa: BLE001
                self._failed(err)

    def end(self, status: str) -> None:
        """End the run FINISHED or FAILED (once; a second call does nothing)."""
        if not self.ended:
            self.ended = True
            self.flush()
            self._call("end_run", status=status)

    def __enter__(self) -> Tracker:  # noqa: PYI034 (typing.Self needs python 3.11 in every image)
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        self.end("FINISHED" if kind is None else "FAILED")
        return False
