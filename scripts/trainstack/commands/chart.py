"""`trainstack chart publish|package|images`: the umbrella chart as an artifact."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from .. import helm, paths, progress, publish, release, render, yamlio
from .. import lock as lockmod


def configure(parser: argparse.ArgumentParser) -> None:
    csub = parser.add_subparsers(dest="chart_command", required=True)
    pub = csub.add_parser("publish", help="package charts/trainstack (dependencies and CRDs included) and push it "
                                          "to an OCI registry with the pinned helm; never overwrites a version")
    pub.add_argument("--registry", help="where to push: oci://HOST[:PORT]/PATH (default: releases.yaml's "
                                        "chartRepository, which the environments name)")
    pub.add_argument("--plain-http", action="store_true", help="the registry speaks plain HTTP (loopback only)")
    pub.add_argument("-o", "--output", choices=["text", "json"], default="text")
    pub.add_argument("--sign", metavar="KEY", help="also push helm provenance (NAME-VERSION.tgz.prov) signed by this "
                                                   "gpg key (user ID or fingerprint; GNUPGHOME selects the keyring)")
    pub.set_defaults(func=run_publish)
    pkg = csub.add_parser("package", help="package charts/trainstack (dependencies and CRDs included) reproducibly "
                                          "into one archive stock helm installs; optionally with provenance")
    pkg.add_argument("--out-dir", dest="destination", metavar="DIR", default="dist", help="folder for the archive (default dist/)")
    pkg.add_argument("--sign", metavar="KEY", help="write NAME-VERSION.tgz.prov beside it, signed by this gpg key "
                                                   "(`helm verify --keyring PUBRING` / `helm install --verify` check it)")
    pkg.set_defaults(func=run_package)
    img = csub.add_parser("images", help="every image an environment's install runs (and its `helm test`), one per "
                                         "line (with its digest where the lock pins one): the list to mirror")
    img.add_argument("--env", default="dev", help="overlay whose values decide the images (default dev)")
    img.set_defaults(func=run_images)


def run_package(args: argparse.Namespace) -> int:
    out_dir = Path(args.destination)
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = publish.package(paths.chart_dir(), out_dir)
    rows = [(str(archive), publish._sha256(archive))]
    prov = archive.with_name(archive.name + ".prov")
    prov.unlink(missing_ok=True)
    if args.sign:
        rows.append((str(publish.sign(archive, args.sign)), "clear-signed by " + args.sign))
    progress.table("trainstack chart package", ["file", "sha256 / signature"], rows)
    return 0


def run_publish(args: argparse.Namespace) -> int:
    result = publish.publish(args.registry or release.chart_repository(), plain_http=args.plain_http, sign_key=args.sign or "")
    if args.output == "json":
        print(json.dumps(asdict(result), indent=2, sort_keys=True))
    else:
        progress.table("trainstack chart publish", ["chart", "version", "digest", "result"],
                       [(result.reference, result.version, result.digest, result.action)])
    return 0


def run_images(args: argparse.Namespace) -> int:
    objects = render.render_objects(args.env)
    # and the `helm test` pod (a hook: GitOps renders leave it out, a helm install's `helm test` runs it)
    hook = helm.run(helm.template_args(None, *render.value_args(args.env), "--show-only", publish.TEST_TEMPLATE,
                                       include_tests=True, kube_version=lockmod.load().kubernetes_version),
                    check=False)
    if hook.returncode == 0:
        objects += [d for d in yamlio.load_all(hook.stdout) if isinstance(d, dict)]
    for reference in publish.images(objects):
        print(reference)
    return 0
