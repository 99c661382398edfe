"""`trainstack chart publish`: the chart pushed to the pinned OCI registry (CNCF distribution, on
loopback, plain HTTP) with the pinned helm, and installed from there as users install it."""

from __future__ import annotations

from support.cli import assert_one_line_error, run_cli


def test_registry_must_be_an_oci_reference():
    result = run_cli("chart", "publish", "--registry", "https://example.invalid/charts")
    assert result.returncode == 2
    assert_one_line_error(result, "--registry", "oci://")


def test_images_walks_every_pod_template_and_adds_pinned_digests(lock):
    import copy

    from trainstack import lock as lockmod
    from trainstack import publish

    data = copy.deepcopy(lock.data)
    first = next(iter(data["images"]))
    entry = data["images"][first]
    entry["digest"] = "sha256:" + "a" * 64
    pinned = lockmod.Lock(path=lock.path, data=data)
    ref = f"{entry['registry']}/{entry['repository']}:{entry['tag']}"
    objects = [
        {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"image": ref}],
                                                              "initContainers": [{"image": "busybox:1.36"}]}}}},
        {"kind": "ClusterTrainingRuntime", "spec": {"template": {"spec": {"replicatedJobs": [
            {"template": {"spec": {"template": {"spec": {"containers": [{"image": "busybox:1.36"}]}}}}}]}}}},
    ]
    assert publish.images(objects, pinned) == ["busybox:1.36", f"{ref}@sha256:{'a' * 64}"]


def test_every_release_tag_publishes_the_signed_chart_to_the_repository_the_environments_name():
    """.github/workflows/release.yaml: a pushed tag vX.Y.Z checks the tree is that release, then runs
    `trainstack chart publish --sign` with no --registry, so the chart lands in releases.yaml's
    chartRepository, the one every overlays/<env>/kustomization.yaml names (make generate writes it)."""
    from conftest import ROOT
    from trainstack import yamlio

    workflow = yamlio.load((ROOT / ".github" / "workflows" / "release.yaml").read_text())
    assert workflow[True]["push"]["tags"] == ["v*.*.*"]  # YAML 1.1 reads the key `on` as true
    script = "\n".join(str(s.get("run", "")) for s in workflow["jobs"]["publish"]["steps"])
    publish = [line for line in script.splitlines() if "trainstack chart publish" in line]
    assert len(publish) == 1 and "--sign" in publish[0] and "--registry" not in publish[0], publish
    assert "release check" in script and "make verify" in script
