"""`trainstack chart publish`: the chart pushed to the pinned OCI registry (CNCF distribution, on
loopback, plain HTTP) with the pinned helm, and installed from there as users install it."""

from __future__ import annotations

from conftest import assert_one_line_error, run_cli


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
