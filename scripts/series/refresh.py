"""Changing the series: ``new`` starts a patch (quilt's ``new``), ``refresh``
folds the edits made in ``vllm/`` into a patch (quilt's ``refresh``)."""

from __future__ import annotations

import datetime
import fnmatch
import re
import shutil
import sys
import tempfile
from pathlib import Path

from scripts.common.paths import BUILD, REPO
from scripts.series.base import Base, load_base
from scripts.series.patchfile import GENERATED, PATCHES, Patch, SeriesError, read_series
from scripts.series.tree import apply_patch, build_tree, inputs_digest, run_git, stamp_path, tree_digest, version_file

# Editor and patch leftovers that refresh never folds into a patch.
JUNK = ("*~", ".*.swp", ".*.swo", ".#*", "*.orig", "*.rej", "*.pyc")
# Where refresh builds its scratch trees.
WORK = BUILD


def _is_junk(path: Path) -> bool:
    return "__pycache__" in path.parts or any(fnmatch.fnmatch(path.name, pat) for pat in JUNK)


def _changed_files(a: Path, b: Path) -> list[str]:
    """Relative paths that differ between two trees (added, removed or
    changed), editor and patch leftovers (``JUNK``) left out."""
    def files(root):
        return {str(p.relative_to(root)) for p in root.rglob("*")
                if p.is_file() and not _is_junk(p.relative_to(root))}
    fa, fb = files(a), files(b)
    changed = sorted((fa ^ fb) | {f for f in fa & fb if (a / f).read_bytes() != (b / f).read_bytes()})
    return changed


def refresh(name: str | None = None, tree: Path = REPO / "vllm", flavor: str = "cpu",
            patches_dir: Path = PATCHES, base: Base | None = None, today: str | None = None) -> Path:
    """Fold the edits made in ``tree`` (against the applied series) into patch
    ``name`` (the topmost by default), keeping its DEP-3 header and setting
    Last-Update. Edits to files that later patches also change are merged into
    the named patch with ``git merge-file``; the whole series must then
    re-apply to exactly ``tree``, else the patch file is left untouched and
    ``SeriesError`` is raised. Returns the patch path."""
    base = base or load_base()
    names = read_series(patches_dir / "series")
    name = name or names[-1]
    if name not in names:
        raise SeriesError(f"{name} is not in patches/series ({', '.join(names)})")
    k = names.index(name)
    tree = Path(tree).resolve()
    if not tree.exists():
        raise SeriesError(f"{tree} does not exist: run python -m scripts.series apply first")
    WORK.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK, prefix="refresh-") as tmp:
        tmp = Path(tmp)
        full = build_tree(base, flavor, tmp / "full", patches_dir=patches_dir)
        edits = [f for f in _changed_files(full, tree) if f not in GENERATED]
        if not edits:
            print(f"{name}: no edits in {tree} against the applied series; patch unchanged",
                  file=sys.stderr)
            return patches_dir / name
        print(f"folding into {name}: " + ", ".join(f"vllm/{e}" for e in edits), file=sys.stderr)
        work = tmp / "work"
        build_tree(base, flavor, work, names[:k], patches_dir)
        (work / ".gitignore").write_text("*.so\n__pycache__/\n")
        run_git(["init", "-q"], work)
        run_git(["add", "-A"], work)
        run_git(["-c", "user.name=refresh", "-c", "user.email=refresh@localhost",
              "-c", "commit.gpgsign=false", "commit", "-q", "-m", "below"], work)
        apply_patch(patches_dir / name, work)
        for rel in edits:
            ours, theirs, mine = work / "vllm" / rel, full / rel, tree / rel
            if not mine.exists():
                ours.unlink(missing_ok=True)
            elif not theirs.exists() or not ours.exists() or ours.read_bytes() == theirs.read_bytes():
                ours.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(mine, ours)
            else:  # a later patch changes this file too: carry over only the edit
                proc = run_git(["merge-file", "-p", str(ours), str(theirs), str(mine)], work, check=False)
                if proc.returncode != 0:
                    later = [n for n in names[k + 1:] if f"a/vllm/{rel} " in Patch.read(patches_dir / n).diff]
                    raise SeriesError(f"cannot fold the edit of vllm/{rel} into {name}: it "
                                      f"overlaps {', '.join(later) or 'a later patch'}; refresh "
                                      "that patch instead")
                ours.write_text(proc.stdout)
        run_git(["add", "-A"], work)
        diff = run_git(["diff", "--cached", "--binary", "--full-index", "HEAD"], work).stdout
        stat = run_git(["diff", "--cached", "--stat", "HEAD"], work).stdout
        old = Patch.read(patches_dir / name)
        day = today or datetime.date.today().isoformat()
        header = re.sub(r"(?m)^Last-Update:.*$", f"Last-Update: {day}", old.header)
        candidate = tmp / name
        candidate.write_text(f"{header}---\n{stat}\n{diff}")
        # the refreshed series must give back exactly the edited tree
        check = build_tree(base, flavor, tmp / "check",
                           patches_dir=_overlay(patches_dir, tmp / "patches", name, candidate))
        diffs = [f for f in _changed_files(check, tree) if f not in GENERATED]
        if diffs:
            raise SeriesError(f"refreshed {name} does not reproduce {tree}: differs in {diffs[:10]}; "
                              "nothing was written")
        shutil.copyfile(candidate, patches_dir / name)
        # the tree is now exactly base + series: record that, so apply knows
        # it holds no unrefreshed edits (and give it the current version file)
        (tree / "_version.py").write_text(version_file(base.flavor_version(flavor)))
        stamp_path(tree).write_text(f"{flavor} {inputs_digest(base, flavor, patches_dir)} {tree_digest(tree)}")
    return patches_dir / name


def _overlay(patches_dir: Path, dest: Path, name: str, replacement: Path) -> Path:
    """A copy of the patches directory with ``name`` replaced."""
    shutil.copytree(patches_dir, dest)
    shutil.copyfile(replacement, dest / name)
    return dest


def new(name: str, description: str, author: str, origin: str = "vendor",
        forwarded: str = "no", patches_dir: Path = PATCHES, today: str | None = None) -> Path:
    """Start patch ``name`` on top of the series (quilt's ``new``): write its
    DEP-3 header, append it to ``series``. Edit ``vllm/``, then ``refresh``.
    Raises ``SeriesError`` if the file exists or the name is not NNNN-topic.patch."""
    if not re.fullmatch(r"\d{4}-[a-z0-9][a-z0-9-]*\.patch", name):
        raise SeriesError(f"patch name {name!r}: use NNNN-topic.patch (e.g. 0002-mrv2-encoder-only.patch)")
    path = patches_dir / name
    if path.exists():
        raise SeriesError(f"{path} exists already")
    taken = [n for n in read_series(patches_dir / "series") if n[:4] == name[:4]]
    if taken:
        raise SeriesError(f"number {name[:4]} is taken by {taken[0]}: use the next free number")
    if not description.strip() or not author.strip():
        raise SeriesError("--description and --author must not be empty (DEP-3 needs both)")
    desc = "\n".join(" " + (line or ".") for line in description.strip().splitlines()[1:])
    first = description.strip().splitlines()[0]
    path.write_text(
        f"Description: {first}\n" + (desc + "\n" if desc else "")
        + f"Author: {author}\nOrigin: {origin}\nForwarded: {forwarded}\n"
        f"Last-Update: {today or datetime.date.today().isoformat()}\n"
    )
    series = patches_dir / "series"
    text = series.read_text()
    series.write_text(text + ("" if text.endswith("\n") or not text else "\n") + name + "\n")
    return path
