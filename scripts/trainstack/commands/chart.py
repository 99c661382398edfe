"""`trainstack chart publish|package|images`: the umbrella chart as an artifact."""

from __future__ import annotations

import argparse

from .. import publish


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
    pub.set_defaults(func=publish._cmd)
    pkg = csub.add_parser("package", help="package charts/trainstack (dependencies and CRDs included) reproducibly "
                                          "into one archive stock helm installs; optionally with provenance")
    pkg.add_argument("--out-dir", dest="destination", metavar="DIR", default="dist", help="folder for the archive (default dist/)")
    pkg.add_argument("--sign", metavar="KEY", help="write NAME-VERSION.tgz.prov beside it, signed by this gpg key "
                                                   "(`helm verify --keyring PUBRING` / `helm install --verify` check it)")
    pkg.set_defaults(func=publish._package_cmd)
    img = csub.add_parser("images", help="every image an environment's install runs (and its `helm test`), one per "
                                         "line (with its digest where the lock pins one): the list to mirror")
    img.add_argument("--env", default="dev", help="overlay whose values decide the images (default dev)")
    img.set_defaults(func=publish._images_cmd)
