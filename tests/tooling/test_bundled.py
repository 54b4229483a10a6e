"""Libraries bundled into a flavor's wheel from pinned Debian packages
(``scripts.series.bundled``): fetched with apt-get, verified, cached, read
with dpkg-deb; clear errors that leave nothing in the cache."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.series.base import REPO, ArtifactMissing, BaseError, ChecksumMismatch, cache_dir, load_base
from scripts.series.bundled import bundled_files, deb_files, fetch_deb

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
