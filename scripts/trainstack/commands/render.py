"""`trainstack render`: an environment's manifests."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from .. import paths, progress, render


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default="dev", help="overlay name under overlays/ (default dev)")
    parser.add_argument("--out-dir", dest="out", metavar="DIR", help="write one file per object under this folder")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text",
                        help="text: one YAML stream; json: one JSON list of the objects")
    parser.add_argument("--values-args", action="store_true",
                        help="print only helm's -f arguments for ENV's values files, in order "
                        "(helm upgrade ... $(trainstack render --env prod --values-args))")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.values_args:  # helm's -f list for ENV (shell words, relative to the repository)
        files = [str(f.relative_to(paths.repo_root())) for f in render.values_files(args.env)]
        print(json.dumps(files) if args.output == "json" else " ".join(f"-f {shlex.quote(f)}" for f in files))
        return 0
    objects = render.render_objects(args.env)
    if args.out:
        written = render.write_dir(objects, Path(args.out))
        progress.info(f"wrote {len(written)} objects to {args.out}")
    elif args.output == "json":
        print(json.dumps(objects, indent=2))
    else:
        sys.stdout.write(render.to_stream(objects))
    return 0
