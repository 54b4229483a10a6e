"""The patch series: apply it to the pinned base, refresh a patch from edits in
``vllm/``, lint it.

Command line::

    python -m scripts.series apply   [--flavor cpu] [--out vllm] [--force]
    python -m scripts.series status                 # is vllm/ base + series, or edited?
    python -m scripts.series new NNNN-topic.patch --author A --description D
    python -m scripts.series refresh [PATCH]        # topmost patch by default
    python -m scripts.series lint

``patches/series`` is quilt's format: one patch file name a line, ``#``
comments and blank lines ignored, an optional ``-p1`` after the name (the only
strip level the series uses). Patches are applied with ``git apply``, which
allows no fuzz: every context line must match. Every patch is checked before
the tree is swapped in, so a patch that does not apply leaves ``vllm/`` as it
was.

The mechanisms live in ``patchfile`` (patch files, DEP-3, lint), ``diff``
(the diff parser), ``tree`` (apply, status) and ``refresh`` (new, refresh);
this module is the command line and keeps their public names importable
from ``scripts.series.patches`` (``setup.py`` and the tests import them here).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from scripts.common.paths import BUILD, REPO
from scripts.series.base import BaseError, load_base
from scripts.series.patchfile import (PATCHES, SERIES, Patch, PatchDoesNotApply, SeriesError, applied_upstream,
                                      lint, lint_tests_map, read_series)
from scripts.series.refresh import new, refresh
from scripts.series.tree import (apply_patch, apply_series, build_tree, extract_base, inputs_digest, stamped_flavor,
                                 tree_digest, tree_state)

__all__ = ["PATCHES", "REPO", "SERIES", "Patch", "PatchDoesNotApply", "SeriesError", "applied_upstream", "apply_patch",
           "apply_series", "build_tree", "extract_base", "inputs_digest", "lint", "lint_tests_map", "main", "new",
           "read_series", "refresh", "tree_digest", "tree_state"]


def main(argv: list[str] | None = None) -> int:
    """``python -m scripts.series {apply,status,new,refresh,lint}`` (see the
    module docstring); returns the exit status: 1 for a series error, a lint
    problem, or (``status``) a ``vllm/`` holding edits or not made by apply."""
    parser = argparse.ArgumentParser(prog="python -m scripts.series", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("apply", help="apply the series to the base, producing vllm/")
    p.add_argument("--flavor", default=os.environ.get("VLLM_TARGET_DEVICE", "cpu"))
    p.add_argument("--out", type=Path, default=REPO / "vllm")
    p.add_argument("--force", action="store_true", help="overwrite edits not refreshed into a patch")
    p = sub.add_parser("refresh", help="fold edits in vllm/ into a patch (topmost by default)")
    p.add_argument("patch", nargs="?")
    p.add_argument("--flavor", default=None, help="default: the flavor vllm/ was applied with")
    p = sub.add_parser("status", help="say whether vllm/ is base + series or holds edits (exit 1)")
    p.add_argument("--flavor", default=None, help="default: the flavor vllm/ was applied with")
    p = sub.add_parser("new", help="start a new patch on top of the series")
    p.add_argument("patch")
    p.add_argument("--description", required=True, help="first line: summary; more lines: details")
    p.add_argument("--author", required=True)
    p.add_argument("--origin", default="vendor")
    p.add_argument("--forwarded", default="no",
                   help="DEP-3 Forwarded: no (default), not-needed (distribution-specific), or a URL")
    sub.add_parser("lint", help="check series listing and DEP-3 headers, then a strict apply")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "apply":
            base = load_base()
            before = tree_state(args.out, base, args.flavor)
            out = apply_series(args.flavor, args.out, base=base, force=args.force)
            if before == "current" and not args.force:
                print(f"{out} is up to date: vllm {base.version} ({args.flavor}) + "
                      f"{len(read_series())} patches")
            else:
                print(f"applied {len(read_series())} patches to vllm {base.version} "
                      f"({args.flavor}) -> {out}")
        elif args.cmd == "status":
            out = REPO / "vllm"
            flavor = args.flavor or stamped_flavor(out) or "cpu"
            state = tree_state(out, load_base(), flavor)
            print(f"vllm/ ({flavor}): {state}")
            return 1 if state in ("edited", "unknown") else 0
        elif args.cmd == "new":
            print(f"started {new(args.patch, args.description, args.author, args.origin, args.forwarded)};"
                  " edit vllm/, then: python -m scripts.series refresh")
        elif args.cmd == "refresh":
            flavor = args.flavor or stamped_flavor(REPO / "vllm") or "cpu"
            print(f"refreshed {refresh(args.patch, flavor=flavor)}")
        elif args.cmd == "lint":
            problems = lint()
            problems += lint_tests_map(read_series(), PATCHES / "tests.toml", collect=True)
            if not problems:
                BUILD.mkdir(exist_ok=True)
                base = load_base()
                for flavor in base.artifacts:
                    with tempfile.TemporaryDirectory(dir=BUILD, prefix="lint-") as tmp:
                        build_tree(base, flavor, Path(tmp))
                print(f"series clean: {len(read_series())} patches, DEP-3 headers complete, "
                      f"applies strictly to {', '.join(base.artifacts)}")
            for p in problems:
                print(f"error: {p}", file=sys.stderr)
            return 1 if problems else 0
    except (SeriesError, BaseError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
