"""values.yaml's Kueue configuration string: upstream's part regenerated, trainstack's keys kept."""

from __future__ import annotations

import io
import tarfile

import pytest
import yaml

from trainstack import kueueconfig, yamlio
from trainstack import lock as lockmod
from trainstack.errors import UserError

UPSTREAM = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
clientConnection:
  qps: 300
#waitForPodsReady:
#  blockAdmission: false
integrations:
  frameworks:
  - "batch/job"
  - "trainer.kubeflow.org/trainjob"
"""

OURS = """\
waitForPodsReady:
  timeout: 10m
  blockAdmission: true
"""


def test_upstreams_part_follows_a_bump_and_ours_is_kept_before_integrations():
    current = kueueconfig.merge(UPSTREAM, OURS)
    bumped = UPSTREAM.replace("qps: 300", "qps: 500\n  burst: 700").replace(
        "kind: Configuration\n", "kind: Configuration\nfairSharing:\n  enable: true\n")
    out = kueueconfig.merge(bumped, current)
    data = yamlio.load(out)
    assert data["clientConnection"] == {"qps": 500, "burst": 700}
    assert data["fairSharing"] == {"enable": True}
    assert data["waitForPodsReady"] == {"timeout": "10m", "blockAdmission": True}
    assert list(data).index("waitForPodsReady") == list(data).index("integrations") - 1
    assert "\n  frameworks:\n  - batch/job\n" in out  # Kueue's layout: list items at their key's indent
    assert "#" not in out  # upstream's comments describe its defaults, not what the chart runs
    assert kueueconfig.merge(bumped, out) == out  # generating again changes nothing


def test_a_value_upstream_changed_by_hand_is_regenerated_and_ours_wins_over_upstreams():
    edited = kueueconfig.merge(UPSTREAM, OURS).replace("qps: 300", "qps: 1")
    assert yamlio.load(kueueconfig.merge(UPSTREAM, edited))["clientConnection"]["qps"] == 300
    upstream_with_it = UPSTREAM + "waitForPodsReady:\n  timeout: 5m\n"
    assert yamlio.load(kueueconfig.merge(upstream_with_it, OURS))["waitForPodsReady"]["blockAdmission"] is True


def test_without_our_keys_it_is_upstreams_default():
    assert yamlio.load(kueueconfig.merge(UPSTREAM, "")) == yamlio.load(UPSTREAM)


def test_a_key_that_is_neither_upstreams_nor_ours_is_refused_in_one_line():
    with pytest.raises(UserError) as err:
        kueueconfig.merge(UPSTREAM, OURS + "objectRetentionPolicies:\n  workloads: {}\n")
    assert str(err.value).count("\n") == 0
    assert "charts/trainstack/values.yaml" in str(err.value) and kueueconfig.KEY in str(err.value)
    assert "objectRetentionPolicies" in str(err.value)
    with pytest.raises(UserError, match="not YAML"):
        kueueconfig.merge(UPSTREAM, "waitForPodsReady: [")


def test_values_yaml_changes_only_the_string(tmp_path):
    values = ("# head comment\nkueue:\n  install: false  # kept\n  managerConfig:\n"
              "    # the string\n    controllerManagerConfigYaml: |-\n      kind: Configuration\n"
              "      waitForPodsReady:\n        timeout: 10m\nimages: {}\n")
    out = kueueconfig.values_yaml(values, UPSTREAM)
    assert out.startswith("# head comment\nkueue:\n  install: false  # kept\n  managerConfig:\n    # the string\n")
    assert out.endswith("images: {}\n")
    string = yamlio.load(out)["kueue"]["managerConfig"]["controllerManagerConfigYaml"]
    assert yamlio.load(string)["waitForPodsReady"] == {"timeout": "10m"}
    assert yamlio.load(string)["clientConnection"] == {"qps": 300}
    assert "controllerManagerConfigYaml: |-\n" in out


def _archive(root, version, values):
    charts = root / "charts" / "trainstack" / "charts"
    charts.mkdir(parents=True)
    data = yaml.safe_dump(values).encode()
    with tarfile.open(charts / f"kueue-{version}.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("kueue/values.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_upstreams_default_is_read_from_the_built_chart_and_its_absence_is_one_line(tmp_path):
    lock = lockmod.load()
    version = lock.chart("kueue").version
    with pytest.raises(UserError, match=rf"kueue-{version}.tgz: not built"):
        kueueconfig.upstream_default(tmp_path, lock)
    _archive(tmp_path, version, {"managerConfig": {"controllerManagerConfigYaml": UPSTREAM}})
    assert kueueconfig.upstream_default(tmp_path, lock) == UPSTREAM
    other = tmp_path / "other"
    _archive(other, version, {"managerConfig": {}})
    with pytest.raises(UserError, match="has no managerConfig.controllerManagerConfigYaml"):
        kueueconfig.upstream_default(other, lock)
