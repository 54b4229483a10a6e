"""Series tooling on a small fake base: strict apply, idempotence, refresh
round trip, edits never lost, lint. And the real series on the real base."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from scripts.series.base import load_base
from scripts.series.lines import end_of_life_lines, line_names
from scripts.series.patches import (Patch, PatchDoesNotApply, SeriesError, apply_series, build_tree, lint,
                                    lint_layout, lint_line, lint_tests_map, new, read_series, refresh, tree_digest)
from tests.conftest import FAKE_FILES, tree_files

HEADER = ("Description: {desc}\nAuthor: Test <t@example>\nOrigin: vendor\n"
          "Forwarded: no\nLast-Update: 2026-01-01\n")


def file_diff(path: str, old: str, new: str) -> str:
    """A git-style diff of one file (made with difflib, not with the tooling under test)."""
    body = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"a/{path}", f"b/{path}"))
    return f"diff --git a/{path} b/{path}\n{body}"


def add_patch(patches: Path, name: str, diff: str, desc: str = "test change") -> None:
    (patches / name).write_text(HEADER.format(desc=desc) + "---\n" + diff)
    with open(patches / "series", "a") as f:
        f.write(name + "\n")


def two_patches(patches: Path) -> tuple[str, str]:
    """0001 changes config.py; 0002 changes config.py further down and runner.py."""
    cfg = FAKE_FILES["vllm/config.py"]
    cfg1 = cfg.replace("OPTION_3 = 3\n", "OPTION_3 = 300\n")
    add_patch(patches, "0001-config.patch", file_diff("vllm/config.py", cfg, cfg1))
    cfg2 = cfg1.replace("OPTION_30 = 30\n", "OPTION_30 = 3000\n")
    run = FAKE_FILES["vllm/runner.py"]
    run2 = run.replace("    return 5\n", "    return 500\n")
    add_patch(patches, "0002-runner.patch",
              file_diff("vllm/config.py", cfg1, cfg2) + file_diff("vllm/runner.py", run, run2))
    return cfg2, run2


def test_apply_series_in_order(tmp_path, fake_base, patches_dir):
    base, _ = fake_base
    cfg2, run2 = two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    assert (out / "config.py").read_text() == cfg2
    assert (out / "runner.py").read_text() == run2
    assert "1.0.0+test.1" in (out / "_version.py").read_text()


def test_apply_twice_gives_the_same_tree(tmp_path, fake_base, patches_dir):
    base, _ = fake_base
    two_patches(patches_dir)
    first = tree_files(apply_series("cpu", tmp_path / "a", patches_dir, base))
    again = tree_files(apply_series("cpu", tmp_path / "a", patches_dir, base, force=True))
    other = tree_files(apply_series("cpu", tmp_path / "b", patches_dir, base))
    assert first == again == other


def test_patch_that_does_not_apply_names_hunk_and_keeps_tree(tmp_path, fake_base, patches_dir):
    base, _ = fake_base
    two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    before = tree_files(out)
    run = FAKE_FILES["vllm/runner.py"]
    # context that is not in the tree: line "    return 7" was never "    return 70"
    wrong = run.replace("    return 7\n", "    return 70\n")
    add_patch(patches_dir, "0003-bad.patch",
              file_diff("vllm/runner.py", wrong, wrong.replace("return 70", "return 71")))
    with pytest.raises(PatchDoesNotApply) as e:
        apply_series("cpu", out, patches_dir, base)
    msg = str(e.value)
    assert "0003-bad.patch" in msg
    assert "vllm/runner.py: hunk @@ -" in msg
    assert tree_files(out) == before
    assert not list(tmp_path.glob(".staging-*"))


def test_fuzz_is_not_accepted(tmp_path, fake_base, patches_dir):
    """A hunk whose context differs in one line fails (GNU patch would apply it with fuzz 1)."""
    base, _ = fake_base
    cfg = FAKE_FILES["vllm/config.py"]
    fuzzy = cfg.replace("OPTION_8 = 8\n", "OPTION_8 = 8  # other context\n")
    add_patch(patches_dir, "0001-fuzzy.patch",
              file_diff("vllm/config.py", fuzzy, fuzzy.replace("OPTION_10 = 10", "OPTION_10 = 11")))
    with pytest.raises(PatchDoesNotApply, match="0001-fuzzy.patch"):
        apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    assert not (tmp_path / "vllm").exists()


def test_apply_refuses_to_overwrite_edits(tmp_path, fake_base, patches_dir):
    base, _ = fake_base
    two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    (out / "runner.py").write_text("edited\n")
    (patches_dir / "0002-runner.patch").write_text(
        (patches_dir / "0002-runner.patch").read_text().replace("Last-Update: 2026-01-01", "Last-Update: 2026-01-02"))
    with pytest.raises(SeriesError, match="edits that are not in its series"):
        apply_series("cpu", out, patches_dir, base)
    assert (out / "runner.py").read_text() == "edited\n"


@pytest.fixture
def repo_work(tmp_path, monkeypatch):
    """refresh() keeps its scratch trees in scripts.series.refresh.WORK."""
    import scripts.series.refresh

    monkeypatch.setattr(scripts.series.refresh, "WORK", tmp_path / "work")


def test_refresh_topmost_round_trip(tmp_path, fake_base, patches_dir, repo_work):
    base, _ = fake_base
    two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    runner = out / "runner.py"
    runner.write_text(runner.read_text().replace("    return 9\n", "    return 900\n"))
    (out / "new_module.py").write_text("NEW = True\n")
    edited = tree_files(out)
    # a tree applied at an older series revision: its version file is apply's, not an edit
    (out / "_version.py").write_text("__version__ = '1.0.0+test.0'\n")
    old_header = Patch.read(patches_dir / "0002-runner.patch").fields()

    refresh(None, out, "cpu", patches_dir, base, today="2026-11-29")

    patch = Patch.read(patches_dir / "0002-runner.patch")
    fields = patch.fields()
    assert fields["Last-Update"] == "2026-11-29"
    assert {k: v for k, v in fields.items() if k != "Last-Update"} == \
        {k: v for k, v in old_header.items() if k != "Last-Update"}
    assert "+    return 900" in patch.diff and "vllm/new_module.py" in patch.diff
    assert "_version.py" not in patch.diff
    assert "1.0.0+test.1" in (out / "_version.py").read_text()
    assert "return 9" not in Patch.read(patches_dir / "0001-config.patch").diff
    clean = apply_series("cpu", tmp_path / "clean", patches_dir, base)
    assert tree_files(clean) == edited
    # the refreshed tree counts as applied: apply keeps it and raises nothing
    assert tree_files(apply_series("cpu", out, patches_dir, base)) == edited


def edit_applied_config(tmp_path, fake_base, patches_dir, old: str, new: str):
    """The two-patch series applied to ``tmp_path/vllm``, then ``old`` replaced
    by ``new`` in its config.py; returns (base, the tree)."""
    base, _ = fake_base
    two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    cfg = out / "config.py"
    cfg.write_text(cfg.read_text().replace(old, new))
    return base, out


def test_refresh_named_patch_below_a_later_one(tmp_path, fake_base, patches_dir, repo_work):
    """An edit to config.py goes into 0001 although 0002 also changes config.py."""
    base, out = edit_applied_config(tmp_path, fake_base, patches_dir, "OPTION_12 = 12\n", "OPTION_12 = 1200\n")
    edited = tree_files(out)
    p2 = (patches_dir / "0002-runner.patch").read_text()

    refresh("0001-config.patch", out, "cpu", patches_dir, base)

    assert "+OPTION_12 = 1200" in (patches_dir / "0001-config.patch").read_text()
    assert (patches_dir / "0002-runner.patch").read_text() == p2
    assert tree_files(apply_series("cpu", tmp_path / "clean", patches_dir, base)) == edited


def test_refresh_that_cannot_reproduce_the_tree_writes_nothing(tmp_path, fake_base, patches_dir, repo_work):
    """Folding into 0001 an edit to the very line 0002 changes cannot give back the tree."""
    base, out = edit_applied_config(tmp_path, fake_base, patches_dir, "OPTION_30 = 3000\n", "OPTION_30 = 4000\n")
    p1 = (patches_dir / "0001-config.patch").read_text()
    with pytest.raises(SeriesError):
        refresh("0001-config.patch", out, "cpu", patches_dir, base)
    assert (patches_dir / "0001-config.patch").read_text() == p1


def test_new_then_refresh(tmp_path, fake_base, patches_dir, repo_work):
    base, _ = fake_base
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    new("0001-feature.patch", "Add a feature\nLonger text.", "Dev <d@example>", patches_dir=patches_dir)
    assert read_series(patches_dir / "series") == ["0001-feature.patch"]
    (out / "config.py").write_text("FEATURE = 1\n")
    refresh(None, out, "cpu", patches_dir, base)
    fields = Patch.read(patches_dir / "0001-feature.patch").fields()
    assert fields["Description"] == "Add a feature\nLonger text."
    assert lint(patches_dir) == []
    assert (apply_series("cpu", tmp_path / "again", patches_dir, base) / "config.py").read_text() == "FEATURE = 1\n"
    with pytest.raises(SeriesError, match="topic 'feature.diff': lower case letters, digits and dashes"):
        new("feature.diff", "x", "y", patches_dir=patches_dir)
    # new numbers a topic itself: the next number after the series
    assert new("feature-b", "B", "Dev <d@example>", patches_dir=patches_dir).name == "0002-feature-b.patch"


def test_lint_finds_missing_header_fields_and_unlisted_patches(patches_dir):
    (patches_dir / "0001-a.patch").write_text("Description: a\n---\ndiff --git a/vllm/_version.py b/vllm/_version.py\n")
    (patches_dir / "0002-b.patch").write_text(HEADER.format(desc="b") + "---\ndiff --git a/x b/x\n")
    (patches_dir / "series").write_text("0001-a.patch\n0003-gone.patch\n")
    (patches_dir / "0004-c.patch").write_text(HEADER.format(desc="c").replace("2026-01-01", "yesterday"))
    (patches_dir / "series").write_text("0001-a.patch\n0003-gone.patch\n0004-c.patch\n0004-c.patch\n")
    problems = lint(patches_dir)
    assert "0004-c.patch: listed more than once in the series" in problems
    assert "0004-c.patch: Last-Update must be a date, YYYY-MM-DD" in problems
    assert "0001-a.patch: DEP-3 header lacks Author" in problems
    assert "0001-a.patch: DEP-3 header lacks Last-Update" in problems
    assert "0001-a.patch: DEP-3 header needs Origin or Forwarded" in problems
    assert "0002-b.patch: not listed in the series" in problems
    assert "0003-gone.patch: listed in the series but missing" in problems
    assert "0001-a.patch: changes vllm/_version.py, which apply writes; drop that hunk" in problems


def test_lint_holds_dep3_forwarding_to_debian_meaning(patches_dir):
    """Forwarded is no, not-needed or a URL; not-needed only with a reason
    (distribution-specific, or upstream's own change); Applied-Upstream is a
    version with at most a URL or commit."""
    diff = "diff --git a/x b/x\n"
    cases = {
        "0001-a.patch": ("Forwarded: no", []),
        "0002-b.patch": ("Forwarded: https://github.com/vllm-project/vllm/pull/7", []),
        "0003-c.patch": ("Forwarded: not-needed", [
            "0003-c.patch: 'Forwarded: not-needed' is for distribution-specific changes: say why in "
            "a Description paragraph starting 'Distribution-specific:', or use 'Forwarded: no' for a "
            "change upstream could take"]),
        "0004-d.patch": ("Forwarded: not-needed\nApplied-Upstream: 0.29.0, "
                         "https://github.com/vllm-project/vllm/pull/1", []),
        "0005-e.patch": ("Forwarded: maybe", [
            "0005-e.patch: Forwarded must be 'no', 'not-needed' or the URL it was sent to (got 'maybe')"]),
        "0006-f.patch": ("Forwarded: not-needed\nApplied-Upstream: 0.27.0, found by running the tests", [
            "0006-f.patch: Applied-Upstream must be the upstream release that carries the change, "
            "optionally with its URL or commit, e.g. 'Applied-Upstream: 0.29.0, "
            "https://github.com/vllm-project/vllm/pull/1'; how it was found goes in the Description "
            "(got '0.27.0, found by running the tests')"]),
    }
    write_headers(patches_dir, {name: fields for name, (fields, _) in cases.items()}, diff)
    assert lint(patches_dir) == [p for _, want in cases.values() for p in want]
    justified = HEADER.format(desc="c\n .\n Distribution-specific: only our CPU machines need it.")
    (patches_dir / "0003-c.patch").write_text(justified.replace("Forwarded: no", "Forwarded: not-needed")
                                               + "---\n" + diff)
    assert not any(p.startswith("0003-c.patch") for p in lint(patches_dir))


def write_headers(patches_dir: Path, fields: dict[str, str], diff: str = "diff --git a/x b/x\n") -> None:
    """Patches named as the keys whose header's Forwarded line is replaced by
    the value (more fields may follow it), listed in that order."""
    for name, text in fields.items():
        (patches_dir / name).write_text(HEADER.format(desc=name).replace("Forwarded: no", text) + "---\n" + diff)
    (patches_dir / "series").write_text("".join(f"{n}\n" for n in fields))


def test_lint_refuses_dep3_fields_that_contradict_each_other(patches_dir):
    """A change upstream carries was not left unforwarded; a reimplementation
    of an upstream change says Origin: backport with its URL, and the patches
    reimplementing one change agree on where upstream stands; Applied-Upstream
    names a release after the line's base."""
    pr = "https://github.com/vllm-project/vllm/pull/50574"
    (patches_dir / "base.toml").write_text('[base]\nversion = "0.26.0"\n')
    write_headers(patches_dir, {
        "0001-a.patch": "Forwarded: no\nApplied-Upstream: 0.32.0",
        "0002-b.patch": f"Forwarded: not-needed\nApplied-Upstream: 0.27.0, {pr}",
        "0003-c.patch": "Forwarded: no",
        "0004-d.patch": f"Forwarded: not-needed\nApplied-Upstream: 0.27.0, {pr}",
        "0005-e.patch": f"Forwarded: not-needed\nApplied-Upstream: 0.27.0, {pr}",
        "0006-f.patch": "Forwarded: not-needed\nApplied-Upstream: 0.25.0",
    })
    for name, origin in (("0002-b.patch", f"other, {pr}"), ("0003-c.patch", "backport"),
                         ("0004-d.patch", f"backport, {pr}"),
                         ("0005-e.patch", f"backport, {pr}")):
        path = patches_dir / name
        path.write_text(path.read_text().replace("Origin: vendor", f"Origin: {origin}"))
    path = patches_dir / "0005-e.patch"
    path.write_text(path.read_text().replace("Applied-Upstream: 0.27.0", "Applied-Upstream: 0.28.0"))
    assert lint(patches_dir) == [
        "0001-a.patch: 'Forwarded: no' with Applied-Upstream: upstream carries the change, so it needs no "
        "forwarding: 'Forwarded: not-needed' (or the URL it was sent to)",
        f"0002-b.patch: Origin 'other, {pr}' names an upstream change: a reimplementation of it says "
        f"'Origin: backport, {pr}'",
        "0003-c.patch: 'Origin: backport' names the upstream change it reimplements: 'Origin: backport, <PR URL>'",
        "0003-c.patch: 'Origin: backport' with 'Forwarded: no': the change is upstream's, so there is nothing to "
        "forward: 'Forwarded: not-needed'",
        "0006-f.patch: Applied-Upstream 0.25.0 is not newer than the line's base 0.26.0: a patch the base "
        "carries has nothing to change",
        f"0004-d.patch, 0005-e.patch: take or reimplement {pr} but disagree on Applied-Upstream "
        f"(0.27.0, {pr} / 0.28.0, {pr})",
    ]


def test_lint_refuses_origin_and_forwarded_that_disagree(patches_dir):
    """A change taken from upstream (Origin: upstream) names it by URL, as a
    reimplementation (Origin: backport) does; neither is 'Forwarded: no'
    (upstream has it); patches naming one upstream change in Origin agree on
    Forwarded and Applied-Upstream. A vendor change sent upstream is fine."""
    pr, other = "https://github.com/vllm-project/vllm/pull/50574", "https://github.com/vllm-project/vllm/pull/48290"
    (patches_dir / "base.toml").write_text('[base]\nversion = "0.26.0"\n')
    cases = {
        "0001-a.patch": (f"upstream, {pr}", f"Forwarded: not-needed\nApplied-Upstream: 0.27.0, {pr}"),
        "0002-b.patch": ("upstream", "Forwarded: not-needed"),
        "0003-c.patch": (f"backport, {other}", "Forwarded: no"),
        "0004-d.patch": (f"upstream, {other}", "Forwarded: not-needed"),
        "0005-e.patch": (f"backport, {pr}", f"Forwarded: not-needed\nApplied-Upstream: 0.28.0, {pr}"),
        "0006-f.patch": ("vendor", f"Forwarded: {pr}"),
    }
    write_headers(patches_dir, {name: forwarded for name, (_, forwarded) in cases.items()})
    for name, (origin, _) in cases.items():
        path = patches_dir / name
        path.write_text(path.read_text().replace("Origin: vendor", f"Origin: {origin}"))
    assert lint(patches_dir) == [
        "0002-b.patch: 'Origin: upstream' names the upstream change it takes: 'Origin: upstream, <commit or PR URL>'",
        "0003-c.patch: 'Origin: backport' with 'Forwarded: no': the change is upstream's, so there is nothing to "
        "forward: 'Forwarded: not-needed'",
        f"0003-c.patch, 0004-d.patch: take or reimplement {other} but disagree on Forwarded (no / not-needed)",
        f"0001-a.patch, 0005-e.patch: take or reimplement {pr} but disagree on Applied-Upstream "
        f"(0.27.0, {pr} / 0.28.0, {pr})",
    ]
    path = patches_dir / "0004-d.patch"
    path.write_text(path.read_text().replace("Forwarded: not-needed", "Forwarded: no"))
    assert "0004-d.patch: 'Origin: upstream' with 'Forwarded: no': the change is upstream's, so there is nothing " \
        "to forward: 'Forwarded: not-needed'" in lint(patches_dir)


def test_lint_holds_descriptions_to_dep3_form(patches_dir):
    """DEP-3's Description: a summary line (the whole 'Description: ...'
    line) under 80 characters, then at most DESCRIPTION_MAX_LINES lines in
    all; a first line left empty is refused."""
    from scripts.series.patchfile import DESCRIPTION_MAX_LINES

    body = "".join(f"\n line {i}" for i in range(1, DESCRIPTION_MAX_LINES))  # the summary and 24 more
    write_headers(patches_dir, dict.fromkeys(["0001-a.patch", "0002-b.patch", "0003-c.patch", "0004-d.patch"],
                                             "Forwarded: no"))
    descriptions = {
        "0001-a.patch": "Description: " + "s" * (79 - len("Description: ")) + body,  # 79 characters, 25 lines
        "0002-b.patch": "Description: " + "s" * (80 - len("Description: ")),
        "0003-c.patch": "Description: summary" + body + "\n .\n one line too many",
        "0004-d.patch": "Description:\n the summary on the next line",
    }
    for name, description in descriptions.items():
        path = patches_dir / name
        path.write_text(path.read_text().replace(f"Description: {name}", description))
    assert lint(patches_dir) == [
        "0002-b.patch: the Description line is 80 characters: DEP-3's first line is a short summary, the whole "
        "'Description: ...' line at most 79; say the rest in the lines after it",
        "0003-c.patch: the Description runs to 27 lines, more than 25: say what the change is, why and where "
        "upstream stands; how it was found goes to the changelog or the commit message",
        "0004-d.patch: the Description's first line is empty: DEP-3's first line is a short summary "
        "('Description: <summary>'), the lines after it say more",
    ]


def test_lint_checks_the_commands_and_files_headers_name(patches_dir):
    """Like the docs (tests/tooling/test_docs.py): a header names commands
    and files that exist."""
    write_headers(patches_dir, {"0001-a.patch": "Forwarded: no"})
    path = patches_dir / "0001-a.patch"
    path.write_text(path.read_text().replace(
        "Description: 0001-a.patch", "Description: a\n found by python -m scripts.drift test-upstream and\n "
        "python -m scripts.series.drift test-upstream; tests/unit/test_gone.py, tests/tooling/test_series.py, "
        "scripts/pool_overhead.py"))
    assert lint(patches_dir) == [
        "0001-a.patch: names the command 'python -m scripts.drift', which does not exist",
        "0001-a.patch: names scripts/pool_overhead.py, which does not exist",
        "0001-a.patch: names tests/unit/test_gone.py, which does not exist",
    ]


def test_lint_accounts_for_every_patch_number(patches_dir):
    """A number is never given to other content: numbers.toml records the
    ones not in the series (unused, withdrawn, dropped) and lint refuses a
    series patch numbered as one of them, and a gap nothing explains."""
    write_headers(patches_dir, {"0001-a.patch": "Forwarded: no", "0004-d.patch": "Forwarded: no",
                                "0006-f.patch": "Forwarded: no", "x-topic.patch": "Forwarded: no"})
    assert lint(patches_dir) == [
        "x-topic.patch: a patch is named NNNN-topic.patch (lower case, digits, dashes)",
        "numbers.toml: patch numbers 0002, 0003, 0005 are neither in the series nor recorded: say why under "
        "[unused] or [withdrawn]"]
    (patches_dir / "series").write_text("0001-a.patch\n0004-d.patch\n0006-f.patch\n")
    (patches_dir / "x-topic.patch").unlink()
    (patches_dir / "numbers.toml").write_text(
        '[unused]\n"0002" = "never given out"\n[withdrawn]\n"0003" = "taken out in revision 2"\n'
        '"0006" = "withdrawn in revision 3"\n[dropped]\n"0005" = { patch = "0005-e.patch", upstream = "1.1.0" }\n')
    assert lint(patches_dir) == [
        "0006-f.patch: number 0006 is recorded as withdrawn in numbers.toml (withdrawn in revision 3); a number "
        "is never given to other content: use the next free one, 0007"]
    with pytest.raises(SeriesError, match="the next free number of the line is 0007"):
        new("0005-again.patch", "x", "Dev <d@example>", patches_dir=patches_dir)
    assert new("again", "x", "Dev <d@example>", patches_dir=patches_dir).name == "0007-again.patch"


def test_patch_numbers_are_one_sequence_over_every_line(tmp_path):
    """A patch carried from line to line keeps its number, so a number one line
    gives to a patch is never given to other content on another line: ``new``
    takes the next number free on every line, and lint refuses a patch
    numbered as another line's patch of another topic. A number of another
    line's series needs no numbers.toml entry here (it is that line's)."""
    old, cur = tmp_path / "1.0.0", tmp_path / "2.0.0"
    for d, names in ((old, ["0001-a.patch", "0002-b.patch"]), (cur, ["0001-a.patch", "0003-c.patch"])):
        d.mkdir()
        (d / "base.toml").write_text("")
        write_headers(d, {n: "Forwarded: no" for n in names})
    assert (lint(old), lint(cur)) == ([], [])
    write_headers(old, {"0001-a.patch": "Forwarded: no", "0002-b.patch": "Forwarded: no",
                        "0003-other.patch": "Forwarded: no"})
    assert lint(old) == ["0003-other.patch: number 0003 is 0003-c.patch on line 2.0.0; a number is never "
                         "given to other content: use the next free one, 0004"]
    (old / "0003-other.patch").unlink()
    write_headers(old, {"0001-a.patch": "Forwarded: no", "0002-b.patch": "Forwarded: no"})
    assert new("d", "D", "Dev <d@example>", patches_dir=old).name == "0004-d.patch"


def test_lint_layout_names_a_patch_left_outside_a_line(tmp_path):
    """A merge from before the lines leaves new patches in patches/ itself."""
    (tmp_path / "1.0.0").mkdir()
    (tmp_path / "1.0.0" / "base.toml").write_text("")
    (tmp_path / "lines.toml").write_text('default = "1.0.0"\n')
    assert lint_layout(tmp_path) == []
    (tmp_path / "0042-new.patch").write_text("")
    assert lint_layout(tmp_path) == [
        "patches/0042-new.patch: not part of a line: move it into its line (git mv patches/0042-new.patch "
        "patches/<line>/) and list it in that line's series"]


def test_lint_checks_the_tests_map(tmp_path):
    """A line's tests.toml names patches of the series, and its node ids are
    collected (pytest runs for the line the directory is named after)."""
    patches_dir = tmp_path / line_names()[0]
    patches_dir.mkdir()
    (patches_dir / "0001-a.patch").write_text(HEADER.format(desc="a") + "---\ndiff --git a/x b/x\n")
    (patches_dir / "series").write_text("0001-a.patch\n")
    (patches_dir / "tests.toml").write_text(
        '[tests]\n"0001-a.patch" = ["tests/tooling/test_series.py::test_lint_checks_the_tests_map"]\n'
        '"0009-gone.patch" = ["tests/tooling/test_series.py::test_no_such_test"]\n')
    assert lint(patches_dir) == ["tests.toml: 0009-gone.patch is not a patch of the series"]
    assert lint_tests_map(["0001-a.patch", "0009-gone.patch"], patches_dir / "tests.toml",
                              collect=True) == [
        "tests.toml: tests/tooling/test_series.py::test_no_such_test is not collected by pytest"]


def test_lint_says_when_the_tests_map_cannot_be_collected(patches_dir, monkeypatch):
    """pytest dying while it collects (an extension module killed by SIGILL,
    exit 132 as the shell reports it) is one problem with pytest's last
    words, not every mapped test "not collected"."""
    import subprocess

    (patches_dir / "tests.toml").write_text(
        '[tests]\n"0001-a.patch" = ["tests/tooling/test_series.py::test_lint_checks_the_tests_map"]\n')
    died = subprocess.CompletedProcess([], 132, stdout="collecting ...\nFatal Python error: Illegal instruction\n")
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: died)
    assert lint_tests_map(["0001-a.patch"], patches_dir / "tests.toml", collect=True) == [
        "tests.toml: pytest could not collect the mapped tests (exit 132); its output ends:\n"
        "collecting ...\nFatal Python error: Illegal instruction"]


# --- the real series on the real base -------------------------------------------------


@pytest.mark.parametrize("line", line_names())
def test_real_series_is_clean(line):
    """patches/, the line's series, numbers, headers, tests map (its mapped
    tests on names the unpatched base defines)."""
    assert lint_line(line, collect=False) == []


@pytest.mark.parametrize("flavor", ["cpu", "cuda"])
@pytest.mark.parametrize("line", [n for n in line_names() if n not in end_of_life_lines()])
def test_real_series_applies_strictly_to_its_base(tmp_path, line, flavor):
    """Every line's series but those past their end of life (kept for
    history, never fetched) applies strictly (no fuzz) to each flavor of its
    base (a candidate line's flavor compiled from the sdist: to the sdist's
    Python sources, nothing compiled); the tree under test (the vllm/ these
    tests import) is the selected line's cpu tree, exactly."""
    import vllm

    from scripts.series.lines import candidate_lines

    base = load_base(line)
    tree = build_tree(base, flavor, tmp_path, sources_only=line in candidate_lines())
    assert f"__version__ = version = {base.flavor_version(flavor)!r}" in (tree / "_version.py").read_text()
    if flavor == "cpu" and line == load_base().line and line not in candidate_lines():  # a candidate: sources only
        assert tree_digest(tree) == tree_digest(Path(vllm.__file__).parent)


def test_apply_refuses_a_tree_it_did_not_make(tmp_path, fake_base, patches_dir):
    base, _ = fake_base
    out = tmp_path / "vllm"
    out.mkdir()
    (out / "mine.py").write_text("precious = True\n")
    with pytest.raises(SeriesError, match="not made by apply"):
        apply_series("cpu", out, patches_dir, base)
    assert (out / "mine.py").read_text() == "precious = True\n"


def test_refresh_leaves_editor_leftovers_out(tmp_path, fake_base, patches_dir, repo_work):
    base, _ = fake_base
    two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    (out / "runner.py~").write_text("backup\n")
    (out / ".runner.py.swp").write_text("swap\n")
    (out / "runner.py").write_text((out / "runner.py").read_text() + "EXTRA = 1\n")
    refresh(None, out, "cpu", patches_dir, base)
    diff = Patch.read(patches_dir / "0002-runner.patch").diff
    assert "+EXTRA = 1" in diff and "runner.py~" not in diff and ".swp" not in diff


def test_refresh_without_edits_leaves_the_patch_alone(tmp_path, fake_base, patches_dir, repo_work):
    base, _ = fake_base
    two_patches(patches_dir)
    out = apply_series("cpu", tmp_path / "vllm", patches_dir, base)
    before = (patches_dir / "0002-runner.patch").read_text()
    refresh(None, out, "cpu", patches_dir, base, today="2099-01-01")
    assert (patches_dir / "0002-runner.patch").read_text() == before


def test_new_refuses_taken_numbers_and_empty_fields(patches_dir):
    (patches_dir / "series").write_text("0001-a.patch")  # no trailing newline
    (patches_dir / "0001-a.patch").write_text(HEADER.format(desc="a"))
    with pytest.raises(SeriesError, match="0001-other.patch: the next free number of the line is 0002"):
        new("0001-other.patch", "x", "y", patches_dir=patches_dir)
    with pytest.raises(SeriesError, match="must not be empty"):
        new("0002-b.patch", "  ", "y", patches_dir=patches_dir)
    new("b", "B", "Dev <d@example>", patches_dir=patches_dir)
    assert read_series(patches_dir / "series") == ["0001-a.patch", "0002-b.patch"]
