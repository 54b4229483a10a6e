"""Applying a patch to a plain directory with git: ``run_git`` (git with the
user's configuration isolated), ``apply_patch`` (strict, checked first, the
failing hunk named). The one implementation for trees of the package
(``scripts.series.tree``) and for sdists a flavor is compiled from
(``scripts.series.source_build``)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from scripts.series.diff import parse_diff
from scripts.series.patchfile import Patch, PatchDoesNotApply, SeriesError


def run_git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``git <args>`` in ``cwd`` as a plain tool on a plain directory (text
    output captured). Raises ``SeriesError`` with git's stderr when it fails
    and ``check``."""
    # GIT_CEILING_DIRECTORIES keeps git from finding this repository above a
    # staging tree: `git apply` must treat the tree as a plain directory.
    # The user's git configuration (signing, excludes, autocrlf) must not
    # change what the tooling computes.
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(Path(cwd).resolve().parent),
               LC_ALL="C", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and proc.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr}")
    return proc


def failing_hunk(patch: Path, git_stderr: str) -> str:
    """The ``@@ ... @@`` header of the hunk git reports as failing, with its file."""
    m = re.search(r"patch failed: (\S+):(\d+)", git_stderr)
    if not m:
        m2 = re.search(r"error: (\S+): (No such file or directory|does not exist in index|already exists)", git_stderr)
        return f"file {m2.group(1)}: {m2.group(2)}" if m2 else git_stderr.strip()
    path, line = m.group(1), int(m.group(2))
    for fd in parse_diff(Patch.read(patch).diff):
        if (fd.new or fd.old) == path:
            for hunk in fd.hunks:
                if hunk.old_start == line:
                    return f"{path}: hunk {hunk.header}"
    return f"{path}: hunk at line {line}"


def apply_patch(patch: Path, root: Path) -> None:
    """Apply one patch strictly to ``root``; ``PatchDoesNotApply`` names the hunk.

    The check runs first, so a failing patch changes nothing in ``root``.
    A header-only patch (just made by ``new``) changes nothing.
    """
    if not Patch.read(patch).diff:
        return
    proc = run_git(["apply", "--check", "--verbose", str(patch)], cwd=root, check=False)
    if proc.returncode != 0:
        raise PatchDoesNotApply(
            f"patch {patch.name} does not apply: {failing_hunk(patch, proc.stderr)}\n"
            f"git apply said:\n{proc.stderr.strip()}\n"
            "Its context lines no longer match the base plus the patches before it "
            "in the line's series: fix them in the patch file (git apply --verbose "
            "shows where it fails), then apply again."
        )
    run_git(["apply", str(patch)], cwd=root)
