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
from scripts.series.lines import Line, next_number, patch_number
from scripts.series.patchfile import GENERATED, Patch, SeriesError, line_dir, read_series
from scripts.series.tree import apply_patch, build_tree, run_git, version_file, write_stamp

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
            patches_dir: Path | None = None, base: Base | None = None, today: str | None = None) -> Path:
    """Fold the edits made in ``tree`` (against the applied series of
    ``base``'s line, the selected line by default) into patch ``name`` (the
    topmost by default), keeping its DEP-3 header and setting Last-Update.
    Edits to files that later patches also change are merged into the named
    patch with ``git merge-file``; the whole series must then re-apply to
    exactly ``tree``, else the patch file is left untouched and
    ``SeriesError`` is raised. Returns the patch path."""
    base = base or load_base()
    patches_dir = Path(patches_dir) if patches_dir is not None else base.dir or line_dir()
    names = read_series(patches_dir / "series")
    if not names:
        raise SeriesError(f"the series of {patches_dir} is empty: start a patch with python -m scripts.series new")
    name = name or names[-1]
    if name not in names:
        raise SeriesError(f"{name} is not in the series of {patches_dir} ({', '.join(names)})")
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
        write_stamp(tree, base, flavor, patches_dir)
    return patches_dir / name


def _overlay(patches_dir: Path, dest: Path, name: str, replacement: Path) -> Path:
    """A copy of the patches directory with ``name`` replaced."""
    shutil.copytree(patches_dir, dest)
    shutil.copyfile(replacement, dest / name)
    return dest


def new(topic: str, description: str, author: str, origin: str = "vendor",
        forwarded: str = "no", patches_dir: Path | None = None, today: str | None = None) -> Path:
    """Start a patch on top of the series of ``patches_dir`` (the selected
    line's by default; quilt's ``new``): the next free number of the line
    (``scripts.series.lines.next_number``: one more than every number in the
    series and in ``numbers.toml``, so a number once used is never given to
    other content), then ``topic`` (``mrv2-foo`` gives ``NNNN-mrv2-foo.patch``;
    a full ``NNNN-topic.patch`` name is taken only with that next number).
    Writes its DEP-3 header and appends it to ``series``. Edit ``vllm/``,
    then ``refresh``. Returns the patch path. Raises ``SeriesError`` for a
    topic that is not lower case, digits and dashes, another number than the
    next free one, and an empty description or author."""
    patches_dir = line_dir(patches_dir)
    names = read_series(patches_dir / "series")
    number = next_number(Line(patches_dir.name, patches_dir), names)
    if topic.endswith(".patch"):
        given = patch_number(topic)
        if given is None:
            raise SeriesError(f"patch name {topic!r}: give a topic (mrv2-encoder-only), or NNNN-topic.patch")
        if given != number:
            raise SeriesError(f"{topic}: the next free number of the line is {number} (numbers in the series "
                              f"and in numbers.toml are never given again): give the topic only, "
                              f"{topic[5:-len('.patch')]!r}, and new numbers it")
        topic = topic[5:-len(".patch")]
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", topic):
        raise SeriesError(f"topic {topic!r}: lower case letters, digits and dashes (e.g. mrv2-encoder-only)")
    name = f"{number}-{topic}.patch"
    path = patches_dir / name
    if path.exists():
        raise SeriesError(f"{path} exists already")
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
