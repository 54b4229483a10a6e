"""The series keeps its base's formatting: every Python file a line's series
touches is formatted as upstream formats it (``ruff format``, upstream's line
length of 88) when the base's version of the file is, and every file the
series adds is. ``python -m scripts.series lint`` reports the files that are
not, with the patches that change them."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from scripts.series.base import Base, fetch
from scripts.series.patchfile import Patch, read_series
from scripts.series.source_build import is_build_patch, sdist_package
from scripts.series.tree import apply_patch, run_git

# vLLM's pyproject.toml: [tool.ruff] line-length = 88, ruff format's defaults
# otherwise. --isolated: our own pyproject's settings are not upstream's.
RUFF_FORMAT = ["format", "--isolated", "--line-length", "88"]


def touched_files(patches_dir: Path) -> dict[str, list[str]]:
    """The files the series of ``patches_dir`` changes or adds (paths
    relative to the tree's root, e.g. ``vllm/config/vllm.py``), each with the
    names of the patches that change it, in series order."""
    touched: dict[str, list[str]] = {}
    for name in read_series(patches_dir / "series"):
        for path in re.findall(r"^diff --git a/(\S+) b/", Patch.read(patches_dir / name).diff, re.M):
            touched.setdefault(path, []).append(name)
    return touched


def _unformatted(root: Path, paths: list[str]) -> set[str]:
    """The ``paths`` under ``root`` that ``ruff format`` would change."""
    if not paths:
        return set()
    proc = subprocess.run([sys.executable, "-m", "ruff", *RUFF_FORMAT, "--check", "--output-format", "concise", *paths],
                          cwd=root, capture_output=True, text=True)
    unformatted = set(re.findall(r"^(\S+?):\d+:\d+: unformatted:", proc.stdout, re.M))
    # 1 means "would reformat" only with the files named; else ruff did not run
    if proc.returncode not in (0, 1) or (proc.returncode == 1) != bool(unformatted):
        raise RuntimeError(f"ruff format --check did not run (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return unformatted


def _base_files(base: Base, flavor: str, paths: set[str]) -> dict[str, bytes]:
    """Those of ``paths`` that the base of ``flavor`` has, with their bytes:
    from its pinned wheel (``fetch``, cached), or for a flavor compiled from
    the sdist, from the sdist's package (``sdist_package``: nothing compiled)."""
    if base.build(flavor).source == "sdist":
        root = sdist_package(base)
        return {p: (root / p).read_bytes() for p in sorted(paths) if (root / p).is_file()}
    with zipfile.ZipFile(fetch(base.artifact(flavor))) as zf:
        names = set(zf.namelist())
        return {p: zf.read(p) for p in sorted(paths) if p in names}


def lint_formatting(base: Base, patches_dir: Path | None = None, flavor: str = "cpu") -> list[str]:
    """Python files of the series that ``ruff format`` (``RUFF_FORMAT``) would
    reformat although the base's version passes it (or the series adds them),
    one problem each naming the file, the patches that change it and the fix.

    ``patches_dir`` is the line's directory (``base.dir`` by default). Builds
    a scratch tree of the files the series touches: the base's versions
    (``_base_files``), then the whole series applied with ``git apply``.
    Raises ``PatchDoesNotApply`` if the series does not apply, and
    ``RuntimeError`` if ruff does not run."""
    patches_dir = Path(patches_dir) if patches_dir is not None else base.dir
    touched = {p: names for p, names in touched_files(patches_dir).items() if p.endswith(".py")}
    with tempfile.TemporaryDirectory(prefix="series-format-") as tmp:
        root = Path(tmp)
        run_git(["init", "-q"], cwd=root)
        files = _base_files(base, flavor, set(touched_files(patches_dir)))
        names = set(files)
        # every file the series touches (so that whole patches apply); .py ones are checked
        for path, data in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        in_base = [p for p in touched if p in names]
        formatted_on_base = set(in_base) - _unformatted(root, in_base)
        for name in read_series(patches_dir / "series"):
            if not is_build_patch(patches_dir / name):  # the sdist's files, not the wheel's
                apply_patch(patches_dir / name, root)
        checked = [p for p in touched if (root / p).exists() and (p in formatted_on_base or p not in names)]
        bad = _unformatted(root, checked)
    return [f"{path}: `ruff {' '.join(RUFF_FORMAT)}` would reformat it as the series leaves it "
            f"({'added by' if path not in names else 'the base passes; changed by'} {', '.join(touched[path])}): "
            f"run that command on the file in the applied tree and refresh the patch"
            for path in sorted(bad)]
