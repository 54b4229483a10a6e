"""Trees of a line's series: the base wheel extracted with the patches applied
strictly (``git apply``, no fuzz), a ``vllm/`` produced by ``apply`` with its
stamp (the line, the flavor, the inputs and tree digests), and its state
(``status``)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts.common.paths import REPO
from scripts.series.base import Base, extract_wheel, load_base
from scripts.series.bundled import bundled_files
from scripts.series.gitapply import apply_patch, failing_hunk, run_git  # noqa: F401  (re-exported)
from scripts.series.patchfile import SeriesError, line_dir, read_series
from scripts.series.source_build import flavor_digest, flavor_wheel, is_build_patch, sdist_package


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
    extract_wheel(wheel, dest, lambda name: name.startswith("vllm/"))
    (dest / "vllm" / "_version.py").write_text(version_file(version))
    return dest / "vllm"


def build_tree(base: Base, flavor: str, dest: Path, names: list[str] | None = None,
               patches_dir: Path | None = None, sources_only: bool = False) -> Path:
    """Extract the base of ``flavor`` (``flavor_wheel``: the pinned wheel, or the
    one compiled from the sdist) into ``dest``, add the flavor's bundled
    libraries under ``vllm/libs/`` (``scripts.series.bundled``: tcmalloc for
    cpu) and apply ``names`` (the whole series of ``patches_dir``, the
    base's line by default) in order, build patches left out (they changed
    the sdist the flavor was compiled from: ``is_build_patch``). With
    ``sources_only``, a flavor compiled from the sdist starts from the
    sdist's package instead (``sdist_package``: its Python sources, no
    compiled extension; nothing is compiled), which is enough to check that
    the series applies. Returns ``dest/vllm``."""
    patches_dir = _patches_of(base, patches_dir)
    if sources_only and base.build(flavor).source == "sdist":
        shutil.copytree(sdist_package(base) / "vllm", dest / "vllm", dirs_exist_ok=True)
        (dest / "vllm" / "_version.py").write_text(version_file(base.flavor_version(flavor)))
        tree = dest / "vllm"
    else:
        tree = extract_base(flavor_wheel(base, flavor), dest, base.flavor_version(flavor))
    for name, data in bundled_files(base, flavor).items():
        (tree / "libs").mkdir(exist_ok=True)
        (tree / "libs" / name).write_bytes(data)
    for name in read_series(patches_dir / "series") if names is None else names:
        if not is_build_patch(patches_dir / name):  # a build patch changes the sdist, not the package
            apply_patch(patches_dir / name, dest)
    return tree


def _patches_of(base: Base, patches_dir: Path | None) -> Path:
    """``patches_dir``, else the directory of ``base``'s line, else the selected line's."""
    return Path(patches_dir) if patches_dir is not None else base.dir or line_dir()


def inputs_digest(base: Base, flavor: str, patches_dir: Path | None = None) -> str:
    """sha256 over what a tree is made of: the base's binaries (``flavor_digest``:
    the pinned wheel's digest, or the inputs of the build from the sdist),
    the distribution version, the bundled packages' digests and files, the
    series and every patch in it (``patches_dir``: the base's line by default)."""
    patches_dir = _patches_of(base, patches_dir)
    h = hashlib.sha256(f"{flavor_digest(base, flavor)}\0{base.flavor_version(flavor)}\0".encode())
    for pkg in base.bundled.get(flavor, []):
        h.update(f"{pkg.sha256}\0{sorted(pkg.files.items())}\0".encode())
    names = read_series(patches_dir / "series")
    for name in names:
        h.update(name.encode() + b"\0" + (patches_dir / name).read_bytes())
    return h.hexdigest()


def stamp_path(out: Path) -> Path:
    """The stamp file ``apply`` writes beside the tree ``out``."""
    return out.parent / f".{out.name}.applied"


@dataclass(frozen=True)
class Stamp:
    """What ``apply`` (or ``refresh``) recorded beside a tree: the flavor, the
    inputs digest (``inputs_digest``), the tree digest (``tree_digest``) and
    the line (None in a stamp written before there were lines)."""

    flavor: str
    inputs: str
    tree: str
    line: str | None

    def text(self) -> str:
        return " ".join([self.flavor, self.inputs, self.tree, *([self.line] if self.line else [])])


def read_stamp(out: Path) -> Stamp | None:
    """The stamp beside ``out``, or None without one."""
    path = stamp_path(Path(out))
    if not path.exists():
        return None
    fields = path.read_text().split()
    return Stamp(*fields[:3], fields[3] if len(fields) > 3 else None)


def write_stamp(out: Path, base: Base, flavor: str, patches_dir: Path | None = None) -> None:
    """Record ``out`` as exactly the series of ``base``'s line applied for ``flavor``."""
    stamp = Stamp(flavor, inputs_digest(base, flavor, patches_dir), tree_digest(out), base.line or None)
    stamp_path(Path(out)).write_text(stamp.text())


def tree_state(out: Path, base: Base, flavor: str, patches_dir: Path | None = None) -> str:
    """``absent``, ``unknown`` (no stamp: not made by apply), ``edited`` (changed
    since it was applied or refreshed), ``other line`` (applied from another
    line, unchanged since), ``stale`` (the series or the base changed since)
    or ``current``."""
    out = Path(out)
    if not out.exists():
        return "absent"
    stamp = read_stamp(out)
    if stamp is None:
        return "unknown"
    if tree_digest(out) != stamp.tree:
        return "edited"
    if stamp.line and base.line and stamp.line != base.line:
        return "other line"
    if (stamp.flavor, stamp.inputs) != (flavor, inputs_digest(base, flavor, patches_dir)):
        return "stale"
    return "current"


def stamped_flavor(out: Path) -> str | None:
    """The flavor ``out`` was applied with, from its stamp."""
    stamp = read_stamp(Path(out))
    return stamp.flavor if stamp else None


def stamped_line(out: Path) -> str | None:
    """The line ``out`` was applied from, from its stamp (None: no stamp, or
    one written before there were lines)."""
    stamp = read_stamp(Path(out))
    return stamp.line if stamp else None


def apply_series(flavor: str = "cpu", out: Path = REPO / "vllm", patches_dir: Path | None = None,
                 base: Base | None = None, force: bool = False) -> Path:
    """Produce ``out`` (``vllm/`` by default): the base of ``flavor`` with the
    series applied (``base``: the selected line's by default; ``patches_dir``:
    its line's directory). Returns ``out``.

    The tree is built in a staging directory beside ``out`` and swapped in only
    when every patch applied, so on any error ``out`` is left as it was. A
    stamp beside ``out`` records the line, the inputs and the tree digest:
    when the inputs are unchanged nothing is done, and a tree edited since it
    was applied, or not made by apply, is not overwritten (``SeriesError``:
    refresh the edits into a patch of the line they belong to first). A tree
    of another line that holds no edits is replaced: that is how ``vllm/``
    moves from one line to another. ``force`` rebuilds in every case,
    discarding edits."""
    base = base or load_base()
    patches_dir = _patches_of(base, patches_dir)
    out = Path(out).resolve()
    want = (flavor, inputs_digest(base, flavor, patches_dir))
    stamp = read_stamp(out)
    if out.exists() and not force:
        if stamp is None:
            raise SeriesError(
                f"{out} exists but was not made by apply (no {stamp_path(out).name}); "
                "replace it with apply --force, or move it away first."
            )
        if (stamp.flavor, stamp.inputs) == want:
            return out
        if tree_digest(out) != stamp.tree:
            line = f" of line {stamp.line}" if stamp.line else ""
            raise SeriesError(
                f"{out} has edits{line} that are not in its series; re-applying would lose "
                f"them. Fold them into a patch (python -m scripts.series refresh [PATCH]) "
                "or discard them (apply --force)."
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=".staging-"))
    try:
        tree = build_tree(base, flavor, staging, patches_dir=patches_dir)
        old = None
        if out.exists():
            old = out.parent / f".old-{out.name}-{os.getpid()}"
            os.rename(out, old)
        os.rename(tree, out)
        write_stamp(out, base, flavor, patches_dir)
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
