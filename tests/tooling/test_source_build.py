"""A flavor compiled from the sdist (scripts.series.source_build): how a line
says where a flavor comes from, build patches told apart from package
patches, a build that cannot reach the network, the cache keyed by every
input, and the errors that name the step, the file and the fix.

The compile itself (half an hour on 2 cores) is not run here: make build-cpu
runs it, and tests/e2e/test_cpu_from_sdist.py tests what it built."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.series import source_build
from scripts.series.base import BaseError, host_platform, load_base
from scripts.series.patchfile import SeriesError
from scripts.series.source_build import (OFFLINE_CMAKE_ARGS, OFFLINE_ENV, SourceBuildError, build_digest,
                                         check_build_patches,
                                         build_flavor, build_patches, is_build_patch, third_party_tree, toolchain,
                                         work_dir)

LINE = "0.32.0"


def _patch(path: Path, *files: str) -> Path:
    diff = "".join(f"diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-a\n+b\n" for f in files)
    path.write_text(f"Description: x\nAuthor: t <t@t>\nOrigin: vendor\nForwarded: no\nLast-Update: 2026-12-06\n---\n"
                    f"\n{diff}")
    return path


def test_a_build_patch_changes_only_files_outside_the_package(tmp_path):
    assert is_build_patch(_patch(tmp_path / "0001-a.patch", "cmake/cpu_extension.cmake", "csrc/cpu/x.cpp"))
    assert not is_build_patch(_patch(tmp_path / "0002-b.patch", "vllm/config/vllm.py"))
    with pytest.raises(SeriesError, match=r"0003-c.patch changes the package \(vllm/x.py\) and the build sources "
                                          r"\(csrc/y.cpp\): split it"):
        is_build_patch(_patch(tmp_path / "0003-c.patch", "vllm/x.py", "csrc/y.cpp"))


def test_the_current_lines_build_patch_is_the_compiler_probe():
    base = load_base(LINE)
    assert [p.name for p in build_patches(base)] == ["0064-cpu-build-probes-compiler.patch"]


def test_a_line_says_how_each_flavor_is_obtained(monkeypatch):
    base = load_base(LINE)
    monkeypatch.delenv("VDIST_BUILD_CPU", raising=False)
    assert base.build("cpu").source == "wheel" and base.build("cuda").source == "wheel"
    assert [t.name for t in base.build("cpu").third_party] == ["onednn"]
    assert [p.package for p in base.build("cpu").packages] == ["libnuma-dev", "libnuma1", "ccache", "libhiredis0.14"]
    assert base.wheel_platform("cpu") == "manylinux_2_31_x86_64"  # the wheel's tag, raised by tcmalloc
    monkeypatch.setenv("VDIST_BUILD_CPU", "sdist")
    assert base.build("cpu").source == "sdist"
    # compiled here: the tag of this machine's glibc, which the binaries are linked against
    assert base.wheel_tags("cpu") == ("cp38", "abi3", host_platform())
    assert host_platform() == "manylinux_2_36_x86_64"  # Debian 12
    monkeypatch.setenv("VDIST_BUILD_CUDA", "sdist")
    with pytest.raises(BaseError, match=r"has no \[build.cuda\] table"):
        base.build("cuda")
    monkeypatch.setenv("VDIST_BUILD_CPU", "source")
    with pytest.raises(BaseError, match="unknown source 'source'.*use one of wheel, sdist"):
        base.build("cpu")
    no_wheel = dataclasses.replace(base, artifacts={"cuda": base.artifacts["cuda"]})
    monkeypatch.setenv("VDIST_BUILD_CPU", "wheel")
    with pytest.raises(BaseError, match=r"pins no cpu wheel \(\[artifacts.cpu\]\)"):
        no_wheel.build("cpu")


def test_the_sdist_is_the_base_releases_own():
    base = load_base(LINE)
    assert base.release_sdist().filename == f"vllm-{LINE}.tar.gz"
    with pytest.raises(BaseError, match="pins no sdist of vLLM"):
        dataclasses.replace(base, upstream={}).release_sdist()


def test_a_build_that_tries_to_clone_fails(tmp_path):
    """What the build passes to CMake and the environment stops a dependency
    fetched at configure time (FetchContent from GitHub, as oneDNN is when
    no local tree is given) before it reaches the network."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.26)\nproject(p LANGUAGES NONE)\ninclude(FetchContent)\n"
        "FetchContent_Declare(oneDNN GIT_REPOSITORY https://github.com/oneapi-src/oneDNN.git GIT_TAG v3.13)\n"
        "FetchContent_MakeAvailable(oneDNN)\n")
    cmake = Path(sys.executable).parent / "cmake"
    proc = subprocess.run([str(cmake), "-S", str(src), "-B", str(tmp_path / "build"), *OFFLINE_CMAKE_ARGS],
                          env=dict(os.environ, **OFFLINE_ENV), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "FETCHCONTENT_FULLY_DISCONNECTED" in proc.stderr and "onednn" in proc.stderr.lower()
    assert not (tmp_path / "build" / "_deps" / "onednn-src" / "CMakeLists.txt").exists()


def test_the_build_digest_covers_every_input(tmp_path, monkeypatch):
    base = load_base(LINE)
    tools = {"g++": "12.2.0 x86_64-linux-gnu", "cmake": "cmake version 4.4.5", "ninja": "1.13.2",
             "python": "cpython-311", "torch": "2.13.0"}
    d0 = build_digest(base, "cpu", tools)
    assert build_digest(base, "cpu", dict(tools)) == d0
    assert build_digest(base, "cpu", {**tools, "g++": "13.1.0 x86_64-linux-gnu"}) != d0
    assert build_digest(base, "cpu", {**tools, "torch": "2.14.0"}) != d0
    # a changed build patch
    lines = tmp_path / "patches" / LINE
    shutil.copytree(base.dir, lines)
    probe = lines / "0064-cpu-build-probes-compiler.patch"
    probe.write_text(probe.read_text().replace("Upstream: not forwarded.", "Upstream: not forwarded (yet)."))
    assert build_digest(dataclasses.replace(base, dir=lines), "cpu", tools) == d0  # its header: nothing compiled
    probe.write_text(probe.read_text().replace("(12.3 or later)", "(13 or later)"))
    assert build_digest(dataclasses.replace(base, dir=lines), "cpu", tools) != d0
    # another third-party source
    onednn = base.builds["cpu"].third_party[0]
    other = dataclasses.replace(base, builds={"cpu": dataclasses.replace(
        base.builds["cpu"], third_party=(dataclasses.replace(onednn, sha256="0" * 64),))})
    assert build_digest(other, "cpu", tools) != d0
    monkeypatch.setattr(source_build, "RECIPE", "next")
    assert build_digest(base, "cpu", tools) != d0


def _cached_work(tmp_path, monkeypatch):
    """The line, its cpu flavor from the sdist, and the work directory its
    build would have in a private cache (``dist/`` made, nothing built)."""
    monkeypatch.setenv("VDIST_CACHE", str(tmp_path))
    monkeypatch.setenv("VDIST_BUILD_CPU", "sdist")
    base = load_base(LINE)
    work = work_dir(base, "cpu", build_digest(base, "cpu", toolchain()))
    (work / "dist").mkdir(parents=True)
    return base, work


def test_a_finished_build_is_not_run_again(tmp_path, monkeypatch):
    base, work = _cached_work(tmp_path, monkeypatch)
    wheel = work / "dist" / "vllm-0.32.0+cpu-cp38-abi3-linux_x86_64.whl"
    wheel.write_bytes(b"built")
    (work / "built.json").write_text(json.dumps({"wheel": wheel.name}))

    def no_build(*a, **k):
        raise AssertionError("a cached build ran again")

    monkeypatch.setattr(subprocess, "Popen", no_build)
    assert build_flavor(base, "cpu") == wheel
    assert source_build.flavor_wheel(base, "cpu") == wheel


def test_a_missing_third_party_source_names_the_file_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("VDIST_THIRD_PARTY", str(tmp_path / "empty"))
    onednn = load_base(LINE).builds["cpu"].third_party[0]
    with pytest.raises(SourceBuildError, match=r"step sources: .*empty/oneDNN-v3.13.tar.gz is missing "
                                               r"\(\[third-party.onednn\].*set VDIST_THIRD_PARTY"):
        third_party_tree(onednn, tmp_path / "out")


def test_a_tampered_third_party_source_is_refused(tmp_path, monkeypatch):
    (tmp_path / "tp").mkdir()
    (tmp_path / "tp" / "oneDNN-v3.13.tar.gz").write_bytes(b"not the pinned tarball")
    monkeypatch.setenv("VDIST_THIRD_PARTY", str(tmp_path / "tp"))
    onednn = load_base(LINE).builds["cpu"].third_party[0]
    with pytest.raises(BaseError, match="sha256"):
        third_party_tree(onednn, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_missing_compiler_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ on it
    with pytest.raises(SourceBuildError, match=r"step toolchain: g\+\+ is not on PATH. Fix: install Debian's g\+\+ "
                                               r"package \(apt-get install g\+\+\)"):
        source_build._toolchain.__wrapped__(sys.executable)


def test_drift_reads_a_build_patch_against_the_targets_build_sources(tmp_path):
    """A build patch is not in the repository of Python sources a rebase or
    drift merges in: it is applied strictly to the target's build files."""
    from scripts.series.rebase import _survey_build

    base = load_base(LINE)
    probe = base.dir / "0064-cpu-build-probes-compiler.patch"
    target = tmp_path / "target"
    check_build_patches(base, target)  # the 0.32.0 sdist's files with 0064 applied
    top = target / f"vllm-{LINE}"
    assert _survey_build(probe, top, tmp_path / "w1")[1:3] == (
        "upstream", "a build patch that reverse-applies: the target has its change")
    subprocess.run(["git", "apply", "--reverse", str(probe)], cwd=top, check=True)
    assert _survey_build(probe, top, tmp_path / "w2")[1] == "applies"
    cmake = top / "cmake" / "cpu_extension.cmake"
    cmake.write_text(cmake.read_text().replace('message(FATAL_ERROR "X86 backend requires gcc/g++ >= 12.3")',
                                               'message(FATAL_ERROR "X86 backend requires gcc/g++ >= 13")'))
    name, status, reason, hunks = _survey_build(probe, top, tmp_path / "w3")
    assert (status, reason) == ("conflicts", "a build patch that does not apply to the target's build sources")
    assert hunks == ["cmake/cpu_extension.cmake: hunk @@ -131,9 +131,13 @@ endif()"]
    (top / "csrc" / "cpu" / "torch_bindings.cpp").unlink()
    assert _survey_build(probe, top, tmp_path / "w4")[1:3] == (
        "conflicts", "the target has no csrc/cpu/torch_bindings.cpp")


def test_the_callers_compiler_settings_do_not_reach_the_build():
    """What would change the compiled result without changing the digest is
    not passed to the build; g++ is the compiler, as the digest records."""
    env, dropped = source_build.build_environment({
        "PATH": "/usr/bin", "HOME": "/root", "CXX": "clang++", "CXXFLAGS": "-O0", "CPATH": "/opt/include",
        "CMAKE_BUILD_TYPE": "Debug", "CMAKE_ARGS": "-DX=1", "VLLM_USE_PRECOMPILED": "1", "VLLM_CPU_AVX512BF16": "0",
        "FETCHCONTENT_SOURCE_DIR_ONEDNN": "/elsewhere", "MAX_JOBS": "64", "PIP_CERT": "/etc/ssl/cert.pem",
        "CCACHE_DISABLE": "1", "CUDA_HOME": "/opt/cuda-12"})
    assert dropped == ["CCACHE_DISABLE", "CMAKE_ARGS", "CMAKE_BUILD_TYPE", "CPATH", "CUDA_HOME", "CXX", "CXXFLAGS",
                       "FETCHCONTENT_SOURCE_DIR_ONEDNN", "MAX_JOBS", "VLLM_CPU_AVX512BF16", "VLLM_USE_PRECOMPILED"]
    assert env == {"PATH": "/usr/bin", "HOME": "/root", "PIP_CERT": "/etc/ssl/cert.pem", **OFFLINE_ENV,
                   "CC": "gcc", "CXX": "g++"}


def test_a_half_written_record_is_no_finished_build(tmp_path, monkeypatch):
    base, work = _cached_work(tmp_path, monkeypatch)
    (work / "dist" / "vllm.whl").write_bytes(b"built")
    (work / "built.json").write_text('{"wheel": "vllm.wh')  # cut off
    assert source_build.built(base, "cpu") is None
    (work / "built.json").write_text('{"wheel": "vllm.whl"}')
    assert source_build.built(base, "cpu") == work / "dist" / "vllm.whl"


def _toolkit(root: Path, headers: bool = True) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    if headers:
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime.h").write_text("")
    return root


def test_a_cuda_torch_builds_against_the_first_real_toolkit(tmp_path):
    """PyPI's torch is a CUDA build, whose CMake config needs a toolkit even for
    the CPU extension: the first candidate with headers and nvcc, not a
    directory holding only an nvcc wrapper (torch's own guess here: /usr/local)."""
    wrapper = _toolkit(tmp_path / "usr-local", headers=False)
    real = _toolkit(tmp_path / "cuda-13.0")
    assert source_build.cuda_toolkit([None, "None", str(wrapper), str(real)], "torch 2.14.1 is a CUDA build") == real
    with pytest.raises(SourceBuildError, match=r"step toolchain: torch 2.14.1 is a CUDA build; .* none was found "
                                               rf"\(looked in {wrapper}\)\. Fix: install torch's CPU build"):
        source_build.cuda_toolkit([None, str(wrapper)], "torch 2.14.1 is a CUDA build")


def test_nvrtc_comes_from_the_toolkit_else_from_torchs_own_package(tmp_path):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    toolkit = _toolkit(tmp_path / "zz-cuda")  # sorts after site/: the toolkit wins by rule, not by name
    assert source_build.cuda_nvrtc(str(python), toolkit) is None
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13").write_text("")
    assert source_build.cuda_nvrtc(str(python), toolkit) == site / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13"
    (toolkit / "lib64").mkdir()
    (toolkit / "lib64" / "libnvrtc.so.13").write_text("")
    assert source_build.cuda_nvrtc(str(python), toolkit) == toolkit / "lib64" / "libnvrtc.so.13"
