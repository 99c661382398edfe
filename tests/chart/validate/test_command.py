"""`trainstack validate` as users run it: exit codes, stdin, usage errors, --env, --kube-version."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.cli import run_cli
from trainstack.validate import command

ROOT = Path(__file__).resolve().parents[3]
VALID = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\ndata:\n  a: '1'\n"
INVALID = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n  a: 1\n"


def cli(*args: str, input_text: str | None = None) -> subprocess.CompletedProcess:
    return run_cli("validate", *args, input_text=input_text, timeout=300)


def one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0]


def test_exit_0_for_valid_and_1_for_invalid(tmp_path: Path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(VALID)
    bad.write_text(INVALID)
    assert cli(str(good)).returncode == 0
    result = cli(str(bad))
    assert result.returncode == 1
    assert f"{bad}:6: error: ConfigMap bad: data.a: Invalid value: 1: expected string, got integer [schema]" \
        in result.stdout


def test_stdin_is_dash():
    result = cli("-", "-o", "json", input_text=VALID + "---\n" + INVALID)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["summary"] == {"documents": 2, "errors": 1, "warnings": 0}
    assert data["findings"][0]["file"] == "-" and data["findings"][0]["document"] == 1


@pytest.mark.parametrize("args,fragments", [
    (["--bogus"], ["unrecognized arguments: --bogus"]),
    (["/no/such/file.yaml"], ["/no/such/file.yaml: no such file or folder"]),
    ([], ["nothing to validate"]),
    (["-", "--kube-version", "one"], ["is not a Kubernetes version"]),
    (["-", "--kube-version", "1.20"], ["no Kubernetes 1.20 is pinned"]),
    (["-", "--output", "xml"], ["invalid choice: 'xml'"]),
])
def test_wrong_usage_exits_2_with_one_line(args: list[str], fragments: list[str]):
    result = cli(*args, input_text="")
    assert result.returncode == 2, result
    one_line_error(result, *fragments)


def test_kube_version_accepts_the_pinned_minor(tmp_path: Path, lock):
    path = tmp_path / "cm.yaml"
    path.write_text(VALID)
    minor = ".".join(lock.kubernetes_version.lstrip("v").split(".")[:2])
    assert command.run([str(path), "--kube-version", minor])[0] == 0
    assert command.run([str(path), "--kube-version", f"v{minor}.0"])[0] == 0


def test_kube_version_of_the_oldest_tested_release_has_its_own_schemas(tmp_path: Path, lock):
    """Every release of the lock's kubernetes.matrix has its built-in schemas (the module zip verified against
    the matrix's sum): a Pod field added after the oldest supported minor is unknown there, known on the pinned one."""
    oldest = lock.kubernetes_supported[0]
    path = tmp_path / "pod.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  hostnameOverride: trainer-0\n"
                    "  containers: [{name: c, image: 'busybox:1.36'}]\n")
    old = cli(str(path), "--kube-version", oldest, "-o", "json")
    assert old.returncode == 1, old.stderr
    assert [f["rule"] for f in json.loads(old.stdout)["findings"]] == ["unknown-field"], old.stdout
    assert cli(str(path)).returncode == 0


def test_schema_cache_lives_under_the_cache_dir_not_the_repo(catalog):
    from trainstack import paths

    cached = list((paths.cache_dir() / "validate").rglob("*.json"))
    assert any(p.name.startswith("kubernetes-v") for p in cached)
    assert any(p.name.startswith("crds-") for p in cached)
    assert not list(ROOT.glob("**/kubernetes-v*.json"))


def test_every_pinned_custom_kind_is_known(catalog):
    for key in ["trainer.kubeflow.org/v1alpha1/TrainJob", "trainer.kubeflow.org/v1alpha1/TrainingRuntime",
                "trainer.kubeflow.org/v1alpha1/ClusterTrainingRuntime", "jobset.x-k8s.io/v1alpha2/JobSet",
                "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet", "argoproj.io/v1alpha1/Application",
                "argoproj.io/v1alpha1/ApplicationSet", "argoproj.io/v1alpha1/AppProject"]:
        assert key in catalog.kinds and not catalog.kinds[key].builtin
    assert catalog.kinds["apps/v1/Deployment"].builtin


@pytest.mark.slow
def test_env_renders_and_validates_the_environment(chart_ready):
    result = cli("--env", "dev", "--policies", "-o", "json")
    data = json.loads(result.stdout)
    assert result.returncode in (0, 1), result.stderr
    assert data["summary"]["documents"] > 10
    assert {f["file"] for f in data["findings"]} <= {"<render --env dev>"}
    assert not [f for f in data["findings"] if f["rule"] in ("internal-error", "policy-config")], data["findings"]
    unknown = [f for f in data["findings"] if f["rule"] == "unknown-kind"]
    assert not unknown, unknown


@pytest.mark.slow
def test_unknown_env_is_a_usage_error():
    result = cli("--env", "no-such-env")
    assert result.returncode == 2
    one_line_error(result, "unknown environment 'no-such-env'")


def test_two_workers_find_exactly_what_one_finds(tmp_path: Path):
    """Large inputs go to worker processes (big files in parts); the findings must not change."""
    from trainstack.benchmarks import validate_corpus as bench

    corpus = tmp_path / "corpus"
    bench.generate(corpus, 2600)
    single = tmp_path / "all-in-one.yaml"
    single.write_text("".join(p.read_text() for p in sorted(corpus.glob("*.yaml"))))
    for target in (corpus, single):
        one = json.loads(command.run([str(target), "-o", "json", "-j", "1"])[1])
        two = json.loads(command.run([str(target), "-o", "json", "-j", "2"])[1])
        assert one == two
        assert one["summary"]["documents"] == 2600
        assert one["summary"]["errors"] > 100


def test_a_quantity_error_names_the_value_not_a_regular_expression(tmp_path: Path):
    path = tmp_path / "pod.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n    - name: c\n"
                    "      image: busybox:1.36\n      resources:\n        requests:\n          cpu: lots\n")
    code, out = command.run([str(path), "-o", "json"])
    assert code == 1
    [finding] = json.loads(out)["findings"]
    assert (finding["rule"], finding["line"], finding["path"]) == (
        "quantity", 11, "/spec/containers/0/resources/requests/cpu")
    assert '"lots" is not a Kubernetes quantity' in finding["message"]
    assert "regular expression" not in finding["message"] and "^(" not in finding["message"]


def test_an_empty_file_is_an_error_not_a_success(tmp_path: Path):
    empty, comments = tmp_path / "empty.yaml", tmp_path / "comments.yaml"
    empty.write_text("")
    comments.write_text("# nothing here yet\n---\n")
    for path in (empty, comments):
        result = cli(str(path))
        assert result.returncode == 1, result
        assert f"{path}:1: error:" in result.stdout and "no Kubernetes objects" in result.stdout
    result = cli("-", input_text="")
    assert result.returncode == 1 and "no Kubernetes objects" in result.stdout
    # beside a file with objects, an empty one is still named
    good = tmp_path / "good.yaml"
    good.write_text(VALID)
    code, out = command.run([str(good), str(empty), "-o", "json"])
    assert code == 1
    assert [(f["file"], f["rule"]) for f in json.loads(out)["findings"]] == [(str(empty), "empty")]


def test_the_repositorys_examples_validate_and_what_is_no_object_is_named(tmp_path: Path):
    code, out = command.run([str(ROOT / "examples"), "-o", "json"])
    result = json.loads(out)
    assert code == 0, [f for f in result["findings"] if f["severity"] == "error"]
    named = {(Path(f["file"]).relative_to(ROOT / "examples").as_posix(), f["rule"]) for f in result["findings"]}
    assert named == {("kustomization.yaml", "not-an-object"), ("teams/values.yaml", "not-an-object")}
    # only a values file's name and a kustomize kind say so: anything else without apiVersion is an error
    (tmp_path / "config.yaml").write_text("teams: {}\n")
    (tmp_path / "values.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: 1\n")
    code, out = command.run([str(tmp_path), "-o", "json"])
    assert code == 1
    assert sorted((Path(f["file"]).name, f["rule"]) for f in json.loads(out)["findings"]) == [
        ("config.yaml", "type-meta"), ("config.yaml", "type-meta"), ("values.yaml", "schema")]
