"""drift test-upstream in a release's own environment (scripts/series/drift/envs.py):
the release's requirements read from its sdist, its torch relaxed to the minor
release PyPI serves, requirements on a direct URL named instead of installed,
the line's build moved to the release, and the tests run with the release's
interpreter and compiled extension. Making a real environment (torch, a
40-minute compile) is not a test: docs/drift.md gives the measured run."""

from __future__ import annotations

import dataclasses
import io
import sys
import tarfile
from pathlib import Path

import pytest

import scripts.series.drift as drift
import scripts.series.drift.envs as envs
from scripts.series.base import (BaseError, UpstreamSources, flavor_requirements, load_base,
                                 sdist_requirement_lines, sha256_file, split_url_requirements)
from scripts.series.drift.envs import TargetEnv, release_base, torch_spec
from scripts.series.source_build import build_patches
from tests.conftest import FAKE_FILES, make_wheel

# vLLM 0.34.0's requirements/cpu.txt, in small: an include, pip options, markers, URLs
CPU_TXT = """\
# Common dependencies
-r common.txt
--extra-index-url https://download.pytorch.org/whl/cpu

numba == 0.65.0 # Required for N-gram speculative decoding
torch==2.99.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
torch==2.99.0; platform_system == "Darwin"
triton @ https://example.invalid/triton-3.8.0+cpu-cp311.whl ; platform_machine == "x86_64" and python_version == "3.11"
triton @ https://example.invalid/triton-3.8.0+cpu-cp312.whl ; platform_machine == "x86_64" and python_version >= "3.12"
"""
COMMON_TXT = "regex # any\n\nnumpy\n-r cpu.txt\n"


def sdist(path: Path, files: dict[str, str]) -> Path:
    """A ``vllm-<v>.tar.gz`` at ``path`` holding ``files`` under its top folder."""
    top = path.name[: -len(".tar.gz")]
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_release_requirements_follow_includes_and_leave_options_out(tmp_path):
    src = sdist(tmp_path / "vllm-0.34.0.tar.gz", {"requirements/cpu.txt": CPU_TXT,
                                                  "requirements/common.txt": COMMON_TXT})
    lines = sdist_requirement_lines(src, "cpu.txt")
    assert lines == [
        "regex", "numpy",  # common.txt, where cpu.txt includes it (its own -r cpu.txt is not read twice)
        "numba == 0.65.0",
        'torch==2.99.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
        'torch==2.99.0; platform_system == "Darwin"',
        'triton @ https://example.invalid/triton-3.8.0+cpu-cp311.whl ; platform_machine == "x86_64" and '
        'python_version == "3.11"',
        'triton @ https://example.invalid/triton-3.8.0+cpu-cp312.whl ; platform_machine == "x86_64" and '
        'python_version >= "3.12"']
    with pytest.raises(BaseError, match="has no requirements/rocm.txt"):
        sdist_requirement_lines(src, "rocm.txt")


def test_a_flavor_compiled_from_the_sdist_installs_the_sdists_requirements(tmp_path, monkeypatch):
    # what `python -m scripts.series.base requirements` prints for the line's venv (Makefile, env):
    # for a flavor built from the sdist, its requirements/<flavor>.txt, as upstream's setup.py
    # writes them into the wheel it builds, before anything is compiled
    monkeypatch.setenv("VDIST_CACHE", str(tmp_path))
    src = sdist(tmp_path / "vllm-0.34.0.tar.gz", {"requirements/cpu.txt": CPU_TXT,
                                                  "requirements/common.txt": COMMON_TXT})
    release = UpstreamSources(flavor="source", project="vllm", version="0.34.0", filename=src.name,
                              sha256=sha256_file(src))
    base = dataclasses.replace(load_base("0.34.0"), upstream={"release": release})
    assert base.build("cpu").source == "sdist"
    index, url = flavor_requirements(base, "cpu")
    assert index == ["regex", "numpy", "numba == 0.65.0"]  # torch's family out, the inline comment out
    assert url == ["triton @ https://example.invalid/triton-3.8.0+cpu-cp311.whl"]  # this Python: 3.11


def test_torch_is_the_releases_minor_release_for_this_machine():
    here = ['torch==2.99.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
            'torch==2.99.0; platform_system == "Darwin"']
    assert torch_spec(here) == "torch==2.99.*"
    with pytest.raises(drift.DriftError, match="pins no torch for this machine"):
        torch_spec(['torch==2.99.0; platform_system == "Darwin"', "regex"])


def test_direct_url_requirements_for_this_machine_are_named_not_installed():
    index, url = split_url_requirements(["regex", "numba == 0.65.0"] + CPU_TXT.splitlines()[-2:])
    assert index == ["regex", "numba == 0.65.0"]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert url == [f"triton @ https://example.invalid/triton-3.8.0+cpu-{tag}.whl"]


def test_the_lines_build_moves_to_the_release(tmp_path):
    line = load_base("0.32.0")
    src = sdist(tmp_path / "vllm-0.34.0.tar.gz", {"requirements/cpu.txt": CPU_TXT})
    moved = release_base(line, "0.34.0", src)
    assert moved.version == "0.34.0"
    assert (moved.release_sdist().filename, moved.release_sdist().sha256) == (src.name, sha256_file(src))
    assert moved.build("cpu").source == "sdist"
    assert moved.build("cpu").third_party == line.build("cpu").third_party
    assert moved.build("cpu").packages == line.build("cpu").packages
    assert [p.name for p in build_patches(moved)] == ["0064-cpu-build-probes-compiler.patch"]
    with pytest.raises(drift.DriftError, match=r"no \[build.cpu\] table"):
        release_base(load_base("0.26.0"), "0.34.0", src)


def test_tests_run_with_the_releases_interpreter_and_extension(tmp_path, fake_base, monkeypatch):
    """env="own": the shadow repository holds the release environment's
    compiled extension and pytest runs with its interpreter; env="line":
    the line's wheel's (the fake one has none) and this interpreter."""
    import scripts.series.drift.upstream as upstream

    base = fake_base[0]
    index = tmp_path / "index"
    index.mkdir()
    make_wheel(index / "fakevllm-1.1.0-py3-none-any.whl", FAKE_FILES, version="1.1.0")
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    venv = tmp_path / "venv"
    (repo / "tests" / "test_probe.py").write_text(
        "import os\nfrom pathlib import Path\n\n\ndef test_extension_is_the_releases():\n"
        "    assert Path('vllm/_C.abi3.so').read_text() == 'compiled from 1.1.0'\n"
        f"    assert os.environ['VIRTUAL_ENV'] == {str(venv)!r}\n"
        f"    assert os.environ['PATH'].split(os.pathsep)[0] == {str(venv / 'bin')!r}\n")
    for d in ("scripts", "patches"):
        (repo / d).mkdir()
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    monkeypatch.setattr(upstream, "REPO", repo)
    own_wheel = tmp_path / "own" / "vllm-1.1.0-cp311-cp311-linux_x86_64.whl"
    own_wheel.parent.mkdir()
    make_wheel(own_wheel, {"vllm/_C.abi3.so": "compiled from 1.1.0"}, version="1.1.0")
    ran = tmp_path / "ran"
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {ran}\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    made = TargetEnv("1.1.0", python, own_wheel, "2.99.1", ("triton @ https://example.invalid/t.whl (a direct URL)",))
    asked = []
    monkeypatch.setattr(envs, "target_env", lambda b, v: asked.append((b, v)) or made)
    mapping = {"0001-runner.patch": ["tests/test_probe.py::test_extension_is_the_releases"]}
    pip_args = ("--no-index", "--find-links", str(index))
    runs = drift.test_upstream([("fakevllm", "1.1.0")], mapping, pip_args=pip_args, base=base)
    assert asked == [(base, "1.1.0")]
    assert runs["1.1.0"].outcomes == {"tests/test_probe.py::test_extension_is_the_releases": "passed"}
    assert runs["1.1.0"].environment == made.describe()
    assert "not installed: triton @ https://example.invalid/t.whl" in made.describe()
    assert "-m pytest" in ran.read_text()
    ran.unlink()
    runs = drift.test_upstream([("fakevllm", "1.1.0")], mapping, pip_args=pip_args, base=base, env="line")
    assert runs["1.1.0"].outcomes == {"tests/test_probe.py::test_extension_is_the_releases": "failed"}
    assert runs["1.1.0"].environment.startswith(f"the line's environment ({sys.executable}")
    assert not ran.exists()
    with pytest.raises(drift.DriftError, match="unknown environment 'venv'"):
        drift.test_upstream([("fakevllm", "1.1.0")], mapping, pip_args=pip_args, base=base, env="venv")

    def cannot(b, v):
        raise drift.DriftError("0064 does not apply to vllm-1.1.0.tar.gz")

    monkeypatch.setattr(envs, "target_env", cannot)  # that release only: the run goes on and reports it
    runs = drift.test_upstream([("fakevllm", "1.1.0")], mapping, pip_args=pip_args, base=base)
    assert runs["1.1.0"].outcomes == {"tests/test_probe.py::test_extension_is_the_releases": "no environment"}
    assert runs["1.1.0"].environment == "not made: 0064 does not apply to vllm-1.1.0.tar.gz"
