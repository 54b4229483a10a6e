"""The drift command line: ``python -m scripts.series.drift [check|test-upstream]``
(options in the ``scripts.series.drift`` docstring)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scripts.common.paths import REPORTS
from scripts.series.base import BaseError, load_base
from scripts.series.drift.classify import release_target, tree_target
from scripts.series.drift.releases import DriftError, newer_releases
from scripts.series.drift.report import details, exit_status, table, write_drift_reports
from scripts.series.drift.upstream import (ENVIRONMENTS, outcomes_by_patch, patch_tests, test_upstream, upstream_summary,
                                           write_upstream_reports)
from scripts.series.lines import LineError
from scripts.series.patchfile import SeriesError, read_series


def _releases_arg(value: str | None, base_version: str, pip_args: tuple[str, ...]) -> list[tuple[str, str]]:
    """``--releases``: ``None``/``none`` no release, ``all`` every release newer
    than the base, ``latest`` the newest, else the versions named (``a,b``) as
    ``(project, version)``. Raises ``DriftError`` naming a version that is not
    a newer release."""
    if value in (None, "", "none"):
        return []
    newer = newer_releases(base_version, pip_args)
    if value == "all":
        return newer
    if value == "latest":
        return newer[-1:]
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    known = dict((v, p) for p, v in newer)
    missing = [v for v in wanted if v not in known]
    if missing:
        raise DriftError(f"not a release newer than {base_version} on the index: {', '.join(missing)}")
    return [(known[v], v) for v in wanted]


def _options(parser: argparse.ArgumentParser, cmd: str, defaults: bool) -> None:
    """The options of ``cmd`` on ``parser``. A subcommand's parser gets them
    without defaults (``defaults`` False), so that it does not undo what the
    main parser read before the subcommand (argparse's rule)."""
    def add(*names, default=None, **kwargs):
        parser.add_argument(*names, default=default if defaults else argparse.SUPPRESS, **kwargs)
    add("--line", help="a line of patches/ (default: $VDIST_LINE, else patches/lines.toml's default)")
    add("--releases", help="'all', 'latest', 'none', or versions a,b (default: 'all', or 'none' with --upstream)")
    add("--out", type=Path, default=REPORTS, help="report directory")
    add("--patches", type=Path, help=argparse.SUPPRESS)
    add("--upstream", type=Path, help="an upstream source tree (a checkout holding vllm/)")
    if cmd == "check":
        add("--three-way", action="store_true",
            help="carry each patch with a three-way merge, as python -m scripts.series rebase does "
                 "(default: strict git apply)")
    if cmd == "test-upstream":
        add("--patch", action="append", help="only these patches")
        add("--ref", help="take tests/ and scripts/ from this commit")
        add("--env", choices=ENVIRONMENTS, default="own",
            help="'own' (default): each release in its own environment, its torch, requirements and cpu "
                 "extension compiled from its sdist (cached; the first build takes about 40 minutes); "
                 "'line': this environment with the line's cpu wheel (quicker; a failure can be the environment's)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``check`` (the default, so ``make drift`` needs no
    subcommand) or ``test-upstream``, each with its options."""
    parser = argparse.ArgumentParser(
        prog="python -m scripts.series.drift", allow_abbrev=False,
        description="Drift of the patch series against newer upstream: which patches still apply, "
                    "which conflict, which upstream carries already, which are obsolete.")
    _options(parser, "check", defaults=True)
    sub = parser.add_subparsers(dest="cmd", metavar="{check,test-upstream}")
    parser.set_defaults(cmd="check", patch=None, ref=None, three_way=False, env="own")
    _options(sub.add_parser("check", help="drift of the series against newer upstream (the default)",
                            allow_abbrev=False), "check", defaults=False)
    _options(sub.add_parser("test-upstream", help="each patch's unit tests on unpatched releases or a checkout",
                            allow_abbrev=False), "test-upstream", defaults=False)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m scripts.series.drift [check|test-upstream]``: the drift report
    (exit 1 when a patch conflicts, 2 when a target cannot be prepared), or
    each patch's unit tests on the unpatched releases (exit 0; the result is
    printed, Applied-Upstream is written by a maintainer)."""
    args = parse_args(argv)
    try:
        base = load_base(args.line)
        patches_dir = args.patches or base.dir
        default = "all" if args.upstream is None else "none"
        releases = _releases_arg(args.releases if args.releases is not None else default, base.version, ())
        trees = [args.upstream] if args.upstream is not None else []
        if not releases and not trees:
            raise DriftError("no target: give --upstream PATH or --releases")
        if args.cmd == "test-upstream":
            mapping = patch_tests(patches_dir / "tests.toml")
            if args.patch:
                mapping = {k: v for k, v in mapping.items() if k in args.patch}
            print(f"line {base.line}: the mapped tests of {len(mapping)} patches on the unpatched "
                  f"{', '.join([v for _, v in releases] + [str(t) for t in trees])}", flush=True)
            runs = test_upstream(releases, mapping, args.ref, base=base, trees=trees, env=args.env)
            jpath, lpath = write_upstream_reports(runs, mapping, args.out)
            print(json.dumps(outcomes_by_patch(runs, mapping), indent=2))
            print(f"\npytest's output: {lpath}; outcomes and output: {jpath}")
            print("\npatch: releases whose unpatched sources pass all its tests "
                  "(first release from which every later one passes); the others' outcomes")
            print("\n".join(upstream_summary(runs, mapping)))
            print("\nenvironments:\n" + "\n".join(f"  {v}: {r.environment}" for v, r in runs.items()))
            return 0
        series = read_series(patches_dir / "series")
        reports = [release_target(project, version, series, patches_dir, base=base, three_way=args.three_way)
                   for project, version in releases]
        reports += [tree_target(tree, series, patches_dir, base=base, three_way=args.three_way) for tree in trees]
        jpath, xpath = write_drift_reports(reports, base.version, series, args.out)
        text = details(reports)
        if text:
            print(text + "\n")
        print(f"reports: {jpath.relative_to(Path.cwd()) if jpath.is_relative_to(Path.cwd()) else jpath}, "
              f"{xpath.name}\n")
        code = exit_status(reports)
        conflicts = sum(len(t.needs_maintainer()) for t in reports)
        how = "three-way merge, as rebase" if args.three_way else "strict git apply"
        print(f"drift of line {base.line} ({len(series)} patches, base {base.version}; {how}): "
              + (f"{conflicts} conflict(s) need a maintainer" if code else "nothing needs a maintainer"))
        print(table(reports, series), flush=True)
        return code
    except (DriftError, SeriesError, BaseError, LineError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception:  # a crash is no finding about the patches: not 1, which soft-fails the step
        import traceback

        traceback.print_exc()
        print("error: drift crashed (above); exit status 2", file=sys.stderr)
        return 2

