"""Libraries bundled into a flavor's wheel from pinned Debian packages
(``scripts.series.bundled``): fetched with apt-get, verified, cached, read
with dpkg-deb; clear errors that leave nothing in the cache."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from scripts.series.base import ArtifactMissing, BaseError, ChecksumMismatch, cache_dir, load_base
from scripts.series.bundled import bundled_files, deb_files, fetch_deb

# sha256 of Debian bookworm's libtcmalloc-minimal4 2.10-1 (amd64) members, read
# with `dpkg-deb -x` and sha256sum on 2026-11-30.
SO_SHA256 = "c65677941aee42ea21cbfb3178986e8901b4e3839aaa7c61e99bea8d9cf89105"
COPYRIGHT_SHA256 = "63c0fd2fb5b2522d9dce82daca4aee0a46155a38c49e68038943fdd15d06dcb0"


def tcmalloc():
    (pkg,) = load_base().bundled["cpu"]
    return pkg


def test_cpu_flavor_bundles_tcmalloc_and_cuda_nothing():
    pkg = tcmalloc()
    assert (pkg.name, pkg.package, pkg.version) == ("tcmalloc", "libtcmalloc-minimal4", "2.10-1")
    assert "cuda" not in load_base().bundled
    files = bundled_files(load_base(), "cpu")
    assert {k: hashlib.sha256(v).hexdigest() for k, v in files.items()} == {
        "libtcmalloc_minimal.so.4": SO_SHA256, "libtcmalloc_minimal.copyright": COPYRIGHT_SHA256}
    assert fetch_deb(pkg).parent == cache_dir()


def test_checksum_mismatch_keeps_nothing(tmp_path):
    pkg = dataclasses.replace(tcmalloc(), sha256="0" * 64)
    with pytest.raises(ChecksumMismatch, match="sha256 mismatch for libtcmalloc-minimal4_2.10-1_amd64.deb"):
        fetch_deb(pkg, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_version_apt_does_not_know_is_named_with_the_fix(tmp_path):
    pkg = dataclasses.replace(tcmalloc(), version="0.0-0", filename="libtcmalloc-minimal4_0.0-0_amd64.deb")
    with pytest.raises(ArtifactMissing, match=r"(?s)libtcmalloc-minimal4=0\.0-0.*Fix: run `apt-get update`"):
        fetch_deb(pkg, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_member_the_package_lacks_is_named():
    pkg = dataclasses.replace(tcmalloc(), files={"libx.so": "usr/lib/libx.so"})
    with pytest.raises(BaseError, match=r"libtcmalloc-minimal4_2\.10-1_amd64\.deb has no usr/lib/libx\.so"):
        deb_files(pkg, fetch_deb(tcmalloc()))
