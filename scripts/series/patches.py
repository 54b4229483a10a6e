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
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from scripts.series.base import REPO, Base, BaseError, fetch, load_base

PATCHES = REPO / "patches"
SERIES = PATCHES / "series"
WORK = REPO / ".build"
DEP3_REQUIRED = ("Description", "Author", "Last-Update")
# Written by apply for the distribution version, never by a patch.
GENERATED = ("_version.py",)
# Editor and patch leftovers that refresh never folds into a patch.
JUNK = ("*~", ".*.swp", ".*.swo", ".#*", "*.orig", "*.rej", "*.pyc")
DEP3_ONE_OF = ("Origin", "Forwarded")


class SeriesError(RuntimeError):
    """The series is malformed, or a patch does not apply or cannot be refreshed."""


class PatchDoesNotApply(SeriesError):
    """A patch of the series does not apply; names the patch, file and hunk."""


def read_series(series: Path = SERIES) -> list[str]:
    """Patch file names of a quilt ``series`` file, in order."""
    names = []
    for lineno, line in enumerate(series.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, *opts = line.split()
        if opts not in ([], ["-p1"]):
            raise SeriesError(f"{series}:{lineno}: unsupported options {opts} (only -p1)")
        names.append(name)
    return names


def _git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
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
    current = None
    for text in patch.read_text().splitlines():
        if text.startswith("+++ "):
            current = text[4:].removeprefix("b/")
        elif text.startswith("@@") and current == path:
            start = int(re.match(r"@@ -(\d+)", text).group(1))
            if start == line:
                return f"{path}: hunk {text}"
    return f"{path}: hunk at line {line}"


def apply_patch(patch: Path, root: Path) -> None:
    """Apply one patch strictly to ``root``; ``PatchDoesNotApply`` names the hunk.

    The check runs first, so a failing patch changes nothing in ``root``.
    A header-only patch (just made by ``new``) changes nothing.
    """
    if not Patch.read(patch).diff:
        return
    proc = _git(["apply", "--check", "--verbose", str(patch)], cwd=root, check=False)
    if proc.returncode != 0:
        raise PatchDoesNotApply(
            f"patch {patch.name} does not apply: {failing_hunk(patch, proc.stderr)}\n"
            f"git apply said:\n{proc.stderr.strip()}\n"
            "Its context lines no longer match the base plus the patches before it "
            "in patches/series: fix them in the patch file (git apply --verbose "
            "shows where it fails), then apply again."
        )
    _git(["apply", str(patch)], cwd=root)


def version_file(version: str) -> str:
    """Contents of ``vllm/_version.py`` for a distribution version."""
    parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+]", version))
    return (
        "# Written by scripts/series/patches.py: the pinned base plus the patch series.\n"
        f"__version__ = version = {version!r}\n"
        f"__version_tuple__ = version_tuple = {parts!r}\n"
        "__commit_id__ = commit_id = None\n"
    )


def extract_base(wheel: Path, dest: Path, version: str) -> Path:
    """Extract the ``vllm`` package of a base wheel into ``dest/vllm`` and write
    its ``_version.py`` for ``version``. Returns ``dest/vllm``."""
    with zipfile.ZipFile(wheel) as zf:
        members = [i for i in zf.infolist() if i.filename.startswith("vllm/")]
        zf.extractall(dest, members)
        for info in members:  # zipfile drops the permission bits (vllm-rs is a binary)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(dest / info.filename, mode)
    (dest / "vllm" / "_version.py").write_text(version_file(version))
    return dest / "vllm"


def build_tree(base: Base, flavor: str, dest: Path, names: list[str] | None = None,
               patches_dir: Path = PATCHES) -> Path:
    """Extract the base of ``flavor`` into ``dest`` and apply ``names`` (the whole
    series by default) in order. Returns ``dest/vllm``."""
    wheel = fetch(base.artifact(flavor))
    tree = extract_base(wheel, dest, base.flavor_version(flavor))
    for name in read_series(patches_dir / "series") if names is None else names:
        apply_patch(patches_dir / name, dest)
    return tree


def inputs_digest(base: Base, flavor: str, patches_dir: Path = PATCHES) -> str:
    """sha256 over what a tree is made of: the base artifact's pinned digest,
    the distribution version, the series and every patch in it."""
    h = hashlib.sha256(f"{base.artifact(flavor).sha256}\0{base.flavor_version(flavor)}\0".encode())
    names = read_series(patches_dir / "series")
    for name in names:
        h.update(name.encode() + b"\0" + (patches_dir / name).read_bytes())
    return h.hexdigest()


def _stamp(out: Path) -> Path:
    return out.parent / f".{out.name}.applied"


def tree_state(out: Path, base: Base, flavor: str, patches_dir: Path = PATCHES) -> str:
    """``absent``, ``unknown`` (no stamp: not made by apply), ``edited`` (changed
    since it was applied or refreshed), ``stale`` (the series or the base
    changed since) or ``current``."""
    out = Path(out)
    if not out.exists():
        return "absent"
    stamp = _stamp(out)
    if not stamp.exists():
        return "unknown"
    recorded_inputs, recorded_tree = stamp.read_text().rsplit(" ", 1)
    if tree_digest(out) != recorded_tree:
        return "edited"
    if recorded_inputs != f"{flavor} {inputs_digest(base, flavor, patches_dir)}":
        return "stale"
    return "current"


def stamped_flavor(out: Path) -> str | None:
    """The flavor ``out`` was applied with, from its stamp."""
    stamp = _stamp(Path(out))
    return stamp.read_text().split(" ", 1)[0] if stamp.exists() else None


def apply_series(flavor: str = "cpu", out: Path = REPO / "vllm", patches_dir: Path = PATCHES,
                 base: Base | None = None, force: bool = False) -> Path:
    """Produce ``out`` (``vllm/`` by default): the base of ``flavor`` with the
    series applied. Returns ``out``.

    The tree is built in a staging directory beside ``out`` and swapped in only
    when every patch applied, so on any error ``out`` is left as it was. A
    stamp beside ``out`` records the inputs and the tree digest: when the
    inputs are unchanged nothing is done, and a tree edited since it was
    applied, or not made by apply, is not overwritten (``SeriesError``:
    refresh the edits into a patch first). ``force`` rebuilds in every case,
    discarding edits."""
    base = base or load_base()
    out = Path(out).resolve()
    want = f"{flavor} {inputs_digest(base, flavor, patches_dir)}"
    stamp = _stamp(out)
    if out.exists() and not force:
        if not stamp.exists():
            raise SeriesError(
                f"{out} exists but was not made by apply (no {stamp.name}); "
                "replace it with apply --force, or move it away first."
            )
        recorded_inputs, recorded_tree = stamp.read_text().rsplit(" ", 1)
        if recorded_inputs == want:
            return out
        if tree_digest(out) != recorded_tree:
            raise SeriesError(
                f"{out} has edits that are not in the series; re-applying would lose "
                "them. Fold them into a patch (python -m scripts.series refresh [PATCH]) "
                "or discard them (apply --force)."
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=".staging-"))
    try:
        tree = build_tree(base, flavor, staging, patches_dir=patches_dir)
        digest = tree_digest(tree)
        old = None
        if out.exists():
            old = out.parent / f".old-{out.name}-{os.getpid()}"
            os.rename(out, old)
        os.rename(tree, out)
        stamp.write_text(f"{want} {digest}")
        if old:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def tree_digest(root: Path) -> str:
    """sha256 over the sorted relative paths and contents of every file under root."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


@dataclass
class Patch:
    """A patch file split into its DEP-3 header and its diff."""

    header: str
    diff: str

    @classmethod
    def read(cls, path: Path) -> "Patch":
        text = path.read_text()
        i = text.find("\ndiff --git ")
        if i < 0:  # a new patch, header only (scripts.series.patches new)
            i = len(text) - 1
        head = text[: i + 1]
        # the header ends at git format-patch's '---' line; the diffstat after it is regenerated
        j = head.find("\n---\n")
        return cls(head[: j + 1] if j >= 0 else head, text[i + 1:])

    def fields(self) -> dict[str, str]:
        """DEP-3 fields of the header (continuation lines folded in)."""
        out: dict[str, str] = {}
        key = None
        for line in self.header.splitlines():
            m = re.match(r"^([A-Za-z][A-Za-z-]*):\s?(.*)$", line)
            if m:
                key = m.group(1)
                out[key] = m.group(2)
            elif key and line.startswith(" "):
                out[key] += "\n" + line.strip()
        return out


def lint(patches_dir: Path = PATCHES) -> list[str]:
    """Problems of the series without applying it: unlisted or missing patch
    files, DEP-3 headers without Description, Author, Last-Update and one of
    Origin/Forwarded, an Applied-Upstream field that does not start with a
    release version. Empty when the series is clean."""
    problems = []
    names = read_series(patches_dir / "series")
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{dup}: listed more than once in patches/series")
    for f in sorted(p.name for p in patches_dir.glob("*.patch")):
        if f not in names:
            problems.append(f"{f}: not listed in patches/series")
    for name in names:
        path = patches_dir / name
        if not path.exists():
            problems.append(f"{name}: listed in patches/series but missing")
            continue
        patch = Patch.read(path)
        for generated in GENERATED:
            if f"diff --git a/vllm/{generated} " in patch.diff:
                problems.append(f"{name}: changes vllm/{generated}, which apply writes; drop that hunk")
        fields = patch.fields()
        # DEP-3 accepts git format-patch's Subject and From for Description and Author.
        fields.setdefault("Description", fields.get("Subject", "").removeprefix("[PATCH] "))
        fields.setdefault("Author", fields.get("From", ""))
        for key in DEP3_REQUIRED:
            if not fields.get(key, "").strip():
                problems.append(f"{name}: DEP-3 header lacks {key}")
        if fields.get("Last-Update", "").strip() and not re.fullmatch(
                r"\d{4}-\d{2}-\d{2}", fields["Last-Update"].strip()):
            problems.append(f"{name}: Last-Update must be a date, YYYY-MM-DD")
        if not any(k in fields for k in DEP3_ONE_OF):
            problems.append(f"{name}: DEP-3 header needs Origin or Forwarded")
        problems += _dep3_forwarding_problems(name, fields)
    return problems + lint_tests_map(names, patches_dir / "tests.toml")


# Debian's DEP-3: Forwarded is "no", "not-needed" or where it was sent (a URL);
# Applied-Upstream is the release that carries the change, optionally with the
# URL or commit where upstream has it. How a release was found belongs in the
# Description.
_URL = r"https?://\S+"
_APPLIED = re.compile(rf"v?(?P<version>[0-9][^,\s]*)(,\s*({_URL}|[0-9a-f]{{7,40}}))?")
_UPSTREAM_ORIGIN = re.compile(rf"(upstream|backport)(,\s*{_URL})?|other,\s*https://github\.com/vllm-project/\S+")


def _dep3_forwarding_problems(name: str, fields: dict[str, str]) -> list[str]:
    """DEP-3 as Debian means it: ``Forwarded`` is ``no``, ``not-needed`` or a
    URL, and ``not-needed`` only for distribution-specific changes (the
    Description says why in a paragraph starting "Distribution-specific:")
    or for upstream's own change (Origin upstream/backport, or other with an
    upstream URL, or Applied-Upstream set); ``Applied-Upstream`` is a release
    version, optionally with a URL or commit, nothing else."""
    problems = []
    forwarded = fields.get("Forwarded", "").strip()
    if forwarded and forwarded not in ("no", "not-needed") and not re.fullmatch(_URL, forwarded):
        problems.append(f"{name}: Forwarded must be 'no', 'not-needed' or the URL it was sent to "
                        f"(got {forwarded!r})")
    if forwarded == "not-needed" and not (
            "Applied-Upstream" in fields
            or _UPSTREAM_ORIGIN.fullmatch(fields.get("Origin", "").split("\n")[0].strip())
            or re.search(r"(?m)^Distribution-specific:", fields.get("Description", ""))):
        problems.append(f"{name}: 'Forwarded: not-needed' is for distribution-specific changes: "
                        "say why in a Description paragraph starting 'Distribution-specific:', "
                        "or use 'Forwarded: no' for a change upstream could take")
    try:
        applied_upstream(fields)
    except SeriesError as e:
        problems.append(f"{name}: {e}")
    return problems


def applied_upstream(fields: dict[str, str]):
    """The release (``packaging.version.Version``) a patch's DEP-3
    ``Applied-Upstream`` field names, or None without the field. Raises
    ``SeriesError`` unless the field is a release version, optionally with a
    URL or commit (how it was found belongs in the Description)."""
    from packaging.version import InvalidVersion, Version

    if "Applied-Upstream" not in fields:
        return None
    value = fields["Applied-Upstream"].strip()
    m = _APPLIED.fullmatch(value)
    try:
        if m is not None:
            return Version(m.group("version"))
    except InvalidVersion:
        pass
    raise SeriesError("Applied-Upstream must be the upstream release that carries the change, "
                      "optionally with its URL or commit, e.g. 'Applied-Upstream: 0.29.0, "
                      "https://github.com/vllm-project/vllm/pull/1'; how it was found goes in the "
                      f"Description (got {value!r})")


def lint_tests_map(names: list[str], tests_toml: Path, collect: bool = False) -> list[str]:
    """Problems of ``patches/tests.toml`` (each patch's unit tests, run by
    ``drift test-upstream``): a key that names no patch of the series, and,
    with ``collect``, a node id pytest does not collect (run from the
    repository root). Empty when the file is absent or clean."""
    if not tests_toml.exists():
        return []
    import tomllib

    table = tomllib.loads(tests_toml.read_text()).get("tests", {})
    problems = [f"{tests_toml.name}: {key} is not a patch of the series"
                for key in table if key not in names]
    if collect:
        ids = sorted({node for nodes in table.values() for node in nodes})
        files = sorted({node.split("::", 1)[0] for node in ids if (REPO / node.split("::", 1)[0]).exists()})
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *files],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        collected = set(re.findall(r"(?m)^(tests/\S+::\S+?)(?:\[.*\])?$", proc.stdout))
        problems += [f"{tests_toml.name}: {node} is not collected by pytest"
                     for node in ids if node not in collected]
    return problems


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
        _git(["init", "-q"], work)
        _git(["add", "-A"], work)
        _git(["-c", "user.name=refresh", "-c", "user.email=refresh@localhost",
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
                proc = _git(["merge-file", "-p", str(ours), str(theirs), str(mine)], work, check=False)
                if proc.returncode != 0:
                    later = [n for n in names[k + 1:] if f"a/vllm/{rel} " in Patch.read(patches_dir / n).diff]
                    raise SeriesError(f"cannot fold the edit of vllm/{rel} into {name}: it "
                                      f"overlaps {', '.join(later) or 'a later patch'}; refresh "
                                      "that patch instead")
                ours.write_text(proc.stdout)
        _git(["add", "-A"], work)
        diff = _git(["diff", "--cached", "--binary", "--full-index", "HEAD"], work).stdout
        stat = _git(["diff", "--cached", "--stat", "HEAD"], work).stdout
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
        _stamp(tree).write_text(f"{flavor} {inputs_digest(base, flavor, patches_dir)} {tree_digest(tree)}")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.series", description=__doc__.split("\n")[0])
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
                WORK.mkdir(exist_ok=True)
                base = load_base()
                for flavor in base.artifacts:
                    with tempfile.TemporaryDirectory(dir=WORK, prefix="lint-") as tmp:
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
