"""`trainstack render`: an environment's manifests."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .. import paths, progress, render


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="overlay name under overlays/ (e.g. dev)")
    parser.add_argument("-o", "--out", help="write one file per object under this folder")
    parser.add_argument("--values-args", action="store_true",
                        help="print only helm's -f arguments for ENV's values files, in order "
                        "(helm upgrade ... $(trainstack render --env prod --values-args))")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.values_args:  # helm's -f list for ENV (shell words, relative to the repository)
        files = [str(f.relative_to(paths.repo_root())) for f in render.values_files(args.env)]
        print(" ".join(f"-f {shlex.quote(f)}" for f in files))
        return 0
    objects = render.render_objects(args.env)
    if args.out:
        written = render.write_dir(objects, Path(args.out))
        progress.info(f"wrote {len(written)} objects to {args.out}")
    else:
        sys.stdout.write(render.to_stream(objects))
    return 0
