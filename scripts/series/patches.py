"""The patch series of a line: apply it to the line's pinned base, refresh a
patch from edits in ``vllm/``, lint it, move it to a new base.

Command line (``--line``: a line of ``patches/``, default ``$VDIST_LINE``,
else ``patches/lines.toml``'s default; for ``refresh`` and ``status`` the
line ``vllm/`` was applied from)::

    python -m scripts.series [--line L] apply [--flavor cpu] [--out vllm] [--force]
    python -m scripts.series status                 # is vllm/ base + series, or edited?
    python -m scripts.series [--line L] new TOPIC --author A --description D   # NNNN-TOPIC.patch, next free number
    python -m scripts.series refresh [PATCH]        # topmost patch by default
    python -m scripts.series [--line L] lint
    python -m scripts.series rebase --from 0.26.0 --onto 0.32.0 [--drop NNNN=RELEASE]
    python -m scripts.series rebase --continue | --abort

A line's ``series`` is quilt's format: one patch file name a line, ``#``
comments and blank lines ignored, an optional ``-p1`` after the name (the only
strip level the series uses). Patches are applied with ``git apply``, which
allows no fuzz: every context line must match. Every patch is checked before
the tree is swapped in, so a patch that does not apply leaves ``vllm/`` as it
was. ``vllm/`` is the maintainer's working tree of one line: ``apply`` with
another line replaces it only when it holds no unrefreshed edits.

The mechanisms live in ``lines`` (the lines, patch numbers), ``patchfile``
(patch files, DEP-3, lint), ``diff`` (the diff parser), ``tree`` (apply,
status), ``refresh`` (new, refresh) and ``rebase``; this module is the
command line and keeps their public names importable from
``scripts.series.patches`` (``setup.py`` and the tests import them here).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from scripts.common.paths import BUILD, REPO
from scripts.series.base import BaseError, load_base
from scripts.series.lines import LineError, get_line
from scripts.series.patchfile import (Patch, PatchDoesNotApply, SeriesError, applied_upstream, lint, lint_layout,
                                      lint_tests_map, read_series)
from scripts.series.refresh import new, refresh
from scripts.series.source_build import check_build_patches
from scripts.series.tree import (apply_patch, apply_series, build_tree, extract_base, inputs_digest, stamped_flavor,
                                 stamped_line, tree_digest, tree_state)

__all__ = ["REPO", "Patch", "PatchDoesNotApply", "SeriesError", "applied_upstream", "apply_patch",
           "apply_series", "build_tree", "extract_base", "inputs_digest", "lint", "lint_layout", "lint_tests_map",
           "main", "new", "read_series", "refresh", "tree_digest", "tree_state"]


def _tree_line(out: Path, asked: str | None) -> str | None:
    """The line whose series ``refresh``/``status`` compare ``out`` with: the
    line it was applied from (its stamp); ``asked`` (``--line``) must agree."""
    stamped = stamped_line(out)
    if asked and stamped and asked != stamped:
        raise SeriesError(f"{out} holds line {stamped}, not {asked}: its edits belong to {stamped}'s series "
                          f"(refresh them there, then python -m scripts.series --line {asked} apply)")
    return stamped or asked


def lint_line(line: str | None = None, collect: bool = True) -> list[str]:
    """Everything ``python -m scripts.series lint`` checks short of applying
    the series to whole trees:
    ``patches/`` itself (``lint_layout``), the line's series (``lint``), its
    tests map with every node id collected (``collect``) and reaching the
    behaviour through names the line's unpatched base defines
    (``scripts.series.testmap``), and the base's formatting kept in every
    file the series touches (``scripts.series.formatting``)."""
    from scripts.series.formatting import lint_formatting
    from scripts.series.testmap import lint_mapped_imports

    base = load_base(line)
    problems = lint_layout(base.dir.parent)
    problems += lint(base.dir)
    problems += lint_tests_map(read_series(base.dir / "series"), base.dir / "tests.toml", collect=collect)
    problems += lint_mapped_imports(base)
    problems += lint_formatting(base)
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m scripts.series {apply,status,new,refresh,lint,rebase}`` (see
    the module docstring); returns the exit status: 1 for a series error, a
    lint problem, or (``status``) a ``vllm/`` holding edits or not made by
    apply; ``rebase`` 1 when it stopped at a patch it cannot carry."""
    parser = argparse.ArgumentParser(prog="python -m scripts.series", description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", default=None,
                        help="a line of patches/ (default: $VDIST_LINE, else patches/lines.toml's default)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("apply", help="apply the line's series to its base, producing vllm/")
    p.add_argument("--flavor", default=os.environ.get("VLLM_TARGET_DEVICE", "cpu"))
    p.add_argument("--out", type=Path, default=REPO / "vllm")
    p.add_argument("--force", action="store_true", help="overwrite edits not refreshed into a patch")
    p = sub.add_parser("refresh", help="fold edits in vllm/ into a patch of its line (topmost by default)")
    p.add_argument("patch", nargs="?")
    p.add_argument("--flavor", default=None, help="default: the flavor vllm/ was applied with")
    p = sub.add_parser("status", help="say which line vllm/ holds and whether it holds edits (exit 1)")
    p.add_argument("--flavor", default=None, help="default: the flavor vllm/ was applied with")
    p = sub.add_parser("new", help="start a new patch on top of the line's series, with the next free number")
    p.add_argument("topic", help="e.g. mrv2-encoder-only (the file becomes NNNN-mrv2-encoder-only.patch)")
    p.add_argument("--description", required=True, help="first line: summary; more lines: details")
    p.add_argument("--author", required=True)
    p.add_argument("--origin", default="vendor",
                   help="DEP-3 Origin: vendor (default), or 'backport, <URL>' for a reimplementation of an "
                        "upstream change")
    p.add_argument("--forwarded", default="no",
                   help="DEP-3 Forwarded: no (default), not-needed (distribution-specific), or a URL")
    p = sub.add_parser("lint", help="check patches/, the line's series, patch numbers, DEP-3 headers and tests "
                                    "map, then a strict apply to every flavor")
    p.add_argument("--sources-only", action="store_true",
                   help="a line without an environment here (a candidate, scripts.series.lines): a flavor compiled "
                        "from the sdist is checked on the sdist's Python sources (nothing compiled), and the mapped "
                        "tests are not collected")
    p = sub.add_parser("rebase", help="move a line's series onto a newer upstream release as a new line")
    from scripts.series.rebase import add_arguments

    add_arguments(p)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "apply":
            base = load_base(args.line)
            _refuse_during_rebase(args.out)
            before = tree_state(args.out, base, args.flavor)
            out = apply_series(args.flavor, args.out, base=base, force=args.force)
            n = len(read_series(base.dir / "series"))
            if before == "current" and not args.force:
                print(f"{out} is up to date: line {base.line}, vllm {base.version} ({args.flavor}) + {n} patches")
            else:
                print(f"applied line {base.line}: {n} patches to vllm {base.version} ({args.flavor}) -> {out}")
        elif args.cmd == "status":
            out = REPO / "vllm"
            from scripts.series.rebase import rebase_in_progress

            progress = rebase_in_progress()
            if progress:
                print(f"vllm/: {progress}")
                return 1
            base = load_base(_tree_line(out, args.line))
            flavor = args.flavor or stamped_flavor(out) or "cpu"
            state = tree_state(out, base, flavor)
            print(f"vllm/ (line {base.line}, {flavor}): {state}")
            return 1 if state in ("edited", "unknown") else 0
        elif args.cmd == "new":
            path = new(args.topic, args.description, args.author, args.origin, args.forwarded,
                       patches_dir=get_line(args.line).dir)
            print(f"started {path.relative_to(REPO) if path.is_relative_to(REPO) else path}; "
                  "edit vllm/, then: python -m scripts.series refresh")
        elif args.cmd == "refresh":
            out = REPO / "vllm"
            _refuse_during_rebase(out)
            base = load_base(_tree_line(out, args.line))
            flavor = args.flavor or stamped_flavor(out) or "cpu"
            print(f"refreshed {refresh(args.patch, out, flavor=flavor, base=base)}")
        elif args.cmd == "lint":
            base = load_base(args.line)
            problems = lint_line(args.line, collect=not args.sources_only)
            if not problems:
                BUILD.mkdir(exist_ok=True)
                flavors = list(dict.fromkeys([*base.artifacts, *base.builds]))
                for flavor in flavors:
                    with tempfile.TemporaryDirectory(dir=BUILD, prefix="lint-") as tmp:
                        build_tree(base, flavor, Path(tmp), sources_only=args.sources_only)
                with tempfile.TemporaryDirectory(dir=BUILD, prefix="lint-") as tmp:
                    build = check_build_patches(base, Path(tmp))
                print(f"line {base.line} clean: {len(read_series(base.dir / 'series'))} patches, numbers "
                      f"accounted for, DEP-3 headers complete and consistent, mapped tests on upstream's names, "
                      f"touched files formatted as upstream's, applies strictly to {', '.join(flavors)}"
                      + (" (the sources of a flavor compiled from the sdist; mapped tests not collected)"
                         if args.sources_only else "")
                      + (f"; build patches ({len(build)}) to the sdist" if build else ""))
            for p in problems:
                print(f"error: {p}", file=sys.stderr)
            return 1 if problems else 0
        elif args.cmd == "rebase":
            from scripts.series.rebase import run_command

            return run_command(args)
    except (SeriesError, BaseError, LineError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _refuse_during_rebase(out: Path) -> None:
    """``SeriesError`` when ``out`` is the working tree of a rebase in progress."""
    from scripts.series.rebase import rebase_in_progress

    progress = rebase_in_progress()
    if progress and Path(out).resolve() == (REPO / "vllm").resolve():
        raise SeriesError(f"vllm/ is the working tree of {progress}")


if __name__ == "__main__":
    sys.exit(main())
