"""`trainstack convert FILE...`: Training Operator v1 jobs to TrainJobs."""

from __future__ import annotations

import argparse

from ..convert import command as convert


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="v1 manifests: files, folders, or - for stdin")
    parser.add_argument("--out-dir", dest="out", metavar="DIR", help="write one TrainJob file per object here (default stdout)")
    parser.add_argument("--env", default="dev", help="environment whose golden runtimes the TrainJobs use (default dev)")
    parser.add_argument("--runtime", help="golden runtime for every object (default: by framework and accelerator)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text",
                        help="text: TrainJobs on stdout, report on stderr; json: both as one JSON document")
    parser.set_defaults(func=convert._cmd)
