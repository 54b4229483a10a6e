"""Shared fixtures: a small fake base (a wheel with a few modules) for the
tooling tests, so that fetch/apply/refresh are exercised in seconds."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from scripts.series.base import Artifact, Base

FAKE_FILES = {
    "vllm/__init__.py": "from vllm._version import __version__\n",
    "vllm/_version.py": "__version__ = '9.9.9'\n",
    "vllm/config.py": "".join(f"OPTION_{i} = {i}\n" for i in range(40)),
    "vllm/runner.py": "".join(f"def step_{i}():\n    return {i}\n\n" for i in range(30)),
}


def make_wheel(path: Path, files: dict[str, str], version: str = "1.0.0") -> str:
    """Write a wheel of project ``fakevllm`` ``version`` holding ``files`` at
    ``path``; return its sha256."""
    info = f"fakevllm-{version}.dist-info"
    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: fakevllm\nVersion: {version}\nRequires-Dist: regex\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": "",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in sorted({**files, **meta}.items()):
            zf.writestr(name, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_base(tmp_path, monkeypatch):
    """A ``Base`` whose cpu artifact is a tiny wheel already in a private cache
    (``VDIST_CACHE``); returns (base, cache dir)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("VDIST_CACHE", str(cache))
    name = "fakevllm-1.0.0-py3-none-any.whl"
    digest = make_wheel(cache / name, FAKE_FILES)
    art = Artifact("cpu", "fakevllm", "1.0.0", name, digest)
    return Base("1.0.0", "2026-01-01", "test", 1, {"cpu": art}), cache


@pytest.fixture
def patches_dir(tmp_path):
    """An empty series directory."""
    d = tmp_path / "patches"
    d.mkdir()
    (d / "series").write_text("# test series\n")
    return d


def tree_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def pytest_addoption(parser):
    parser.addoption("--family-default-runner-only", action="store_true",
                     help="tests/e2e/test_matrix.py's family cases on the runner vLLM picks by default only, "
                          "not also on V1 (a maintenance line's share of make test: one matrix row per family)")


def pytest_collection_modifyitems(config, items):
    """Deselect the tests marked ``line(...)`` that do not name the line under
    test (``scripts.series.lines.get_line()``: ``make LINE=`` exports it as
    ``VDIST_LINE``; marks at several levels narrow: a test runs on a line
    that every one of its ``line`` marks names), and those marked ``cpu_from_sdist`` unless the line's cpu
    flavor is compiled from the sdist (``make CPU_FROM=sdist``, or base.toml's
    ``[build.cpu] from``), and those that run V1 (marked ``v1``, or
    parametrized with the value ``"v1"`` or ``"V1"``: ``runner="v1"``) where
    the base has no V1 (``scripts.validation.engine.base_runners``: from
    0.34.0). Deselected, not skipped: pytest reports them as deselected,
    never as passed."""
    from scripts.series.base import load_base
    from scripts.series.lines import get_line

    line = get_line().name
    from_sdist = load_base(line).build("cpu").source == "sdist"
    has_v1 = None  # asked of the tree only when a test runs V1 (it imports vllm)
    keep, drop = [], []
    for item in items:
        marks = list(item.iter_markers("line"))
        wrong_line = marks and not all(line in mark.args for mark in marks)
        wrong_source = item.get_closest_marker("cpu_from_sdist") is not None and not from_sdist
        runs_v1 = item.get_closest_marker("v1") is not None or any(
            isinstance(v, str) and v in ("v1", "V1") for v in getattr(getattr(item, "callspec", None), "params",
                                                                       {}).values())
        if runs_v1 and has_v1 is None:
            from scripts.validation.engine import base_runners

            has_v1 = "V1" in base_runners()
        (drop if wrong_line or wrong_source or (runs_v1 and not has_v1) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
