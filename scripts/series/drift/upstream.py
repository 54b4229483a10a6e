"""``drift test-upstream``: each patch's unit tests (the line's ``tests.toml``)
run against the unpatched sources of newer releases or of an upstream
checkout, each node id's outcome told apart (``TEST_OUTCOMES``), pytest's
output kept in the reports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from scripts.common.paths import BUILD, REPO, REPORTS
from scripts.common.reports import write_reports
from scripts.series.base import Base, extract_wheel, load_base
from scripts.series.drift.releases import DriftError, fetch_release, release_sources, tree_version
from scripts.series.patchfile import line_dir
from scripts.series.source_build import flavor_wheel
from scripts.series.testmap import BaseSources, unknown_names
from scripts.series.tree import version_file


def patch_tests(path: Path | None = None) -> dict[str, list[str]]:
    """A line's ``tests.toml`` (the selected line's by default): patch file
    name -> pytest node ids (relative to the repository) that show the
    patch's behaviour."""
    with open(path or line_dir() / "tests.toml", "rb") as f:
        return {k: list(v) for k, v in tomllib.load(f).get("tests", {}).items()}


def shadow_repo(release_src: Path, dest: Path, ref: str | None = None, base: Base | None = None,
                wheel: Path | None = None) -> Path:
    """A repository-shaped directory at ``dest``: ``vllm/`` is the release's
    (or an upstream checkout's) unpatched sources (copied; a checkout's
    missing ``_version.py`` written for its ``git describe`` version) with
    the compiled extensions of ``wheel`` (default: the cpu flavor's wheel of
    ``base``, the selected line's base by default, ``flavor_wheel``; symlinked
    where the sources have none), ``scripts/``,
    ``tests/``, ``patches/`` and ``pyproject.toml`` copies of this
    repository's: of the work tree, or of commit ``ref``. Returns ``dest``."""
    shutil.copytree(release_src / "vllm", dest / "vllm", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if not (dest / "vllm" / "_version.py").exists():
        version = tree_version(release_src)
        (dest / "vllm" / "_version.py").write_text(version_file(str(version) if version else "0.0.0.dev0"))
    wheel = wheel or flavor_wheel(base or load_base(), "cpu")
    ext = dest / ".base-ext"
    for name in extract_wheel(wheel, ext, lambda n: n.startswith("vllm/") and n.endswith(".so")):
        target = dest / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(ext / name)
    if ref:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref,
                                  "scripts", "tests", "patches", "pyproject.toml"], stdout=subprocess.PIPE)
        if archive.returncode != 0:
            raise DriftError(f"git archive {ref} failed")
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return dest
    for d in ("scripts", "tests", "patches"):
        shutil.copytree(REPO / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


# What a pytest node id can come to on a release: the junit outcomes, two that
# pytest's junit report does not tell apart from "error" (or leaves out), and
# "name gone": the test reaches a vLLM name the release no longer defines
# (scripts.series.testmap.unknown_names; e.g. vllm.config.vllm.HAS_TRITON on
# 0.34.0), so it is not run there: its failure would say nothing of the behaviour;
# "no environment": the release's own environment could not be made (its message is
# the run's ``environment``), so nothing ran there.
TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "not collected", "import error", "name gone",
                 "no environment")


@dataclass
class TestRun:
    """The patches' tests on one tree: ``outcomes`` maps each node id to one
    of ``TEST_OUTCOMES``; ``output`` maps each test file to pytest's output
    (stdout and stderr, every run of it) so a report shows why."""

    __test__ = False  # not a pytest test class
    outcomes: dict[str, str]
    output: dict[str, str]
    gone: dict[str, list[str]] = field(default_factory=dict)  # node id: the names the release lacks
    environment: str = ""  # what the tests ran with (TargetEnv.describe, or the line's)


def _run_pytest(repo: Path, env: dict, nodes: list[str], junit: Path,
                timeout: int, python: str = sys.executable) -> tuple[int | None, str, list[ET.Element] | None]:
    """One pytest process of ``python`` on ``nodes``: (exit status or None on
    timeout, its output, the junit test cases or None when it wrote none)."""
    junit.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "scripts.series.drift.test_timeout",
           "-o", "addopts=", "--continue-on-collection-errors", f"--junitxml={junit}", *nodes]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=env, timeout=timeout, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        code, text = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        partial = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code, text = None, partial + f"\n[drift: pytest timed out after {timeout} s]\n"
    cases = list(ET.parse(junit).iter("testcase")) if junit.exists() else None
    return code, f"$ {' '.join(cmd[1:])}\n{text}", cases


def _case_outcome(case: ET.Element) -> str:
    return ("failed" if case.find("failure") is not None else
            "error" if case.find("error") is not None else
            "skipped" if case.find("skipped") is not None else "passed")


def _outcomes(repo: Path, env: dict, nodes: list[str], junit: Path,
              timeout: int, python: str = sys.executable) -> tuple[dict[str, str], str]:
    """The outcome of each node id, from one pytest process (pytest goes on
    past modules that do not import), and pytest's output. A module that does
    not import (pytest's "collection failure") makes every node of it
    ``import error``; a node id pytest does not find (``ERROR: not found``:
    the test or parameter is gone) is ``not collected`` and the others are
    run again without it; a parametrized test is ``passed`` only when every
    case passed; no junit report (pytest crashed or timed out): ``error``."""
    outcomes: dict[str, str] = {}
    texts: list[str] = []
    pending = list(nodes)
    while pending:
        code, text, cases = _run_pytest(repo, env, pending, junit, timeout, python)
        texts.append(text)
        crashed = _crashed_node(repo, text, pending) if cases is None else None
        if crashed:  # the interpreter died in one test (faulthandler names it): the others run again,
            # but for those pytest reported passed or skipped before it died (its -v lines; a
            # failure's details come only with pytest's summary, so failed ones run again)
            outcomes.update(dict.fromkeys(crashed, "error"))
            done = {n: o for n, o in _reported(text, [n for n in pending if n not in crashed]).items()
                    if o in ("passed", "skipped")}
            outcomes.update(done)
            pending = [n for n in pending if n not in crashed and n not in done]
            continue
        lines = [line.rstrip() for line in text.splitlines() if line.startswith("ERROR: not found: ")]
        missing = [n for n in pending if any(line.endswith("/" + n) or line.endswith(" " + n) for line in lines)]
        # a node id in a module that does not import stops pytest before it runs anything
        unimportable = [n for n in pending
                        if re.search(rf"^ERROR: found no collectors for \S*{re.escape(n.split('::')[0])}(::|$)",
                                     text, re.M)]
        if code == 4 and (missing or unimportable):
            outcomes.update(dict.fromkeys(missing, "not collected"))
            outcomes.update(dict.fromkeys(unimportable, "import error"))
            pending = [n for n in pending if n not in missing and n not in unimportable]
            continue
        if cases is None:
            outcomes.update(dict.fromkeys(pending, "error"))
            break
        broken = {c.get("name", "").replace(".", "/") + ".py" for c in cases
                  if c.get("classname") == "" and c.find("error") is not None
                  and c.find("error").get("message") == "collection failure"}
        ran: dict[str, str] = {}
        for case in cases:
            mod = case.get("classname", "").replace(".", "/")
            ran[f"{mod}.py::{case.get('name')}"] = _case_outcome(case)
        for node in pending:
            if node.split("::")[0] in broken:
                outcomes[node] = "import error"
                continue
            states = [s for k, s in ran.items() if k == node or k.startswith(node + "[")]
            outcomes[node] = ("not collected" if not states else
                              next((s for s in ("failed", "error", "skipped") if s in states), "passed"))
        break
    return outcomes, "".join(texts)


_VERBOSE = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "XFAIL": "skipped",
            "XPASS": "passed"}


def _reported(text: str, nodes: list[str]) -> dict[str, str]:
    """The outcomes pytest's ``-v`` lines give for ``nodes`` (a parametrized
    test by its cases: ``passed`` only when every case passed)."""
    seen: dict[str, list[str]] = {}
    for m in re.finditer(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", text, re.M):
        seen.setdefault(m.group(1), []).append(_VERBOSE[m.group(2)])
    out = {}
    for node in nodes:
        states = [s for k, v in seen.items() if k == node or k.startswith(node + "[") for s in v]
        if states:
            out[node] = next((s for s in ("failed", "error", "skipped") if s in states), "passed")
    return out


def _crashed_node(repo: Path, text: str, pending: list[str]) -> list[str]:
    """The pending node ids of the test the interpreter died in, from
    faulthandler's traceback in pytest's output ("Fatal Python error", most
    recent call first: the outermost frame in the tests is the test
    function); empty when it names none."""
    if "Fatal Python error" not in text:
        return []
    tail = text[text.rindex("Fatal Python error"):]
    frames = re.findall(rf'File "{re.escape(str(repo))}/(tests/[^"]+\.py)", line \d+ in (\w+)', tail)
    for path, func in reversed(frames):
        hit = [n for n in pending if n == f"{path}::{func}" or n.startswith(f"{path}::{func}[")]
        if hit:
            return hit
    return []


def run_patch_tests(repo: Path, node_ids: list[str], timeout: int = 3600, line: str | None = None,
                    python: str = sys.executable) -> TestRun:
    """Run pytest node ids in the repository-shaped ``repo`` (its ``vllm/`` on
    the path, not this repository's), in one pytest process of ``python``
    (this interpreter by default; a release's own venv) that goes on
    past modules that do not import (a module that does not import fails only
    its own tests). Each node id gets one of ``TEST_OUTCOMES`` (see
    ``_outcomes``); pytest's output is kept, under each test file it ran."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    # The shadow's compiled extensions are the base cpu wheel's: say so, or
    # the sources of a `vllm` (CUDA) wheel find no platform on this machine.
    # the repository's own scripts after the shadow's (the per-test limit's plugin)
    env.update(PYTHONPATH=os.pathsep.join([str(repo), str(Path(__file__).resolve().parents[3])]), HF_HUB_OFFLINE="1",
               VLLM_TARGET_DEVICE="cpu")
    # the shared data the tests read beside this repository (scripts/validation/checkpoints/models.py)
    from scripts.validation.checkpoints.models import STS_TEST

    env.setdefault("STS_DATA", str(STS_TEST.parent))
    if line:
        env["VDIST_LINE"] = line
    if python != sys.executable:  # a release's venv: its commands first, as in a shell that activated it
        venv = Path(python).parent.parent
        env.update(PATH=os.pathsep.join([str(venv / "bin"), env.get("PATH", "")]), VIRTUAL_ENV=str(venv))
    outcomes, text = _outcomes(repo, env, list(dict.fromkeys(node_ids)), repo / "junit.xml", timeout, python)
    files = sorted({node.split("::")[0] for node in node_ids})
    return TestRun({n: outcomes[n] for n in node_ids}, dict.fromkeys(files, text))


def upstream_target_name(path: Path) -> str:
    """The name an upstream checkout's results go under: ``upstream`` and its
    version (``tree_version``), ``upstream`` alone when that is unknown."""
    version = tree_version(Path(path))
    return "upstream" + (f" {version}" if version else "")


ENVIRONMENTS = ("own", "line")


def test_upstream(releases: list[tuple[str, str]], mapping: dict[str, list[str]],
                  ref: str | None = None, pip_args: tuple[str, ...] = (), base: Base | None = None,
                  trees: list[Path] = (), env: str = "own") -> dict[str, TestRun]:
    """For each release ``(project, version)`` and each upstream checkout in
    ``trees`` (a directory holding ``vllm/``), the patches' tests (``tests/``
    of the work tree, or of commit ``ref``) run on its unpatched sources:
    ``{version or upstream target name: TestRun}``.

    ``env="own"`` (the default): a release's tests run in its own environment
    (``scripts.series.drift.envs.target_env``: its torch and requirements,
    its cpu extension compiled from its sdist with the line's build patches);
    ``env="line"``: in this interpreter's environment with the cpu wheel of
    ``base`` (the selected line's), which is quicker and says less (a failure
    can be the environment's). An upstream checkout always runs with the
    line's environment. ``TestRun.environment`` says which. A test that
    reaches a vLLM name the target does not define is not run: its outcome
    is ``name gone`` (``TestRun.gone`` names them); a release whose own
    environment cannot be made gets ``no environment`` for every test, the
    reason in ``TestRun.environment``. Raises ``DriftError`` for a tree
    without ``vllm/`` or an unknown ``env``."""
    if env not in ENVIRONMENTS:
        raise DriftError(f"unknown environment {env!r}: use one of {', '.join(ENVIRONMENTS)}")
    base = base or load_base()
    out: dict[str, TestRun] = {}
    BUILD.mkdir(exist_ok=True)
    nodes = sorted({n for ids in mapping.values() for n in ids})
    line_env = (sys.executable, None, f"the line's environment ({sys.executable}, line {base.line}'s cpu wheel)")

    def own(version: str):
        from scripts.series.drift.envs import target_env

        made = target_env(base, version)
        return str(made.python), made.wheel, made.describe()

    sources = [(version, lambda p=project, v=version: release_sources(
        fetch_release(p, v, pip_args=pip_args, platform=base.platform)),
        (lambda v=version: own(v)) if env == "own" else (lambda: line_env)) for project, version in releases]
    for tree in trees:
        if not (Path(tree) / "vllm").is_dir():
            raise DriftError(f"{tree} holds no vllm/ package: give the root of an upstream checkout")
        sources.append((upstream_target_name(tree), lambda t=tree: Path(t).resolve(), lambda: line_env))
    for name, src, environment in sources:
        try:
            python, wheel, described = environment()
        except DriftError as e:  # this target only: the others still run and the report is written
            print(f"== {name}: no environment: {e}", flush=True)
            out[name] = TestRun(dict.fromkeys(nodes, "no environment"), {}, {}, f"not made: {e}")
            continue
        print(f"== {name}: {described}", flush=True)
        with tempfile.TemporaryDirectory(dir=BUILD, prefix="upstream-tests-") as tmp:
            root = src()
            repo = shadow_repo(root, Path(tmp), ref, base, wheel)
            names = BaseSources(root)
            gone = {n: missing for n in nodes if (missing := unknown_names(n, names, repo))}
            runnable = [n for n in nodes if n not in gone]
            run = (run_patch_tests(repo, runnable, line=base.line or None, python=python) if runnable
                   else TestRun({}, {}))
            out[name] = TestRun({n: "name gone" if n in gone else run.outcomes[n] for n in nodes}, run.output, gone,
                                described)
    return out


test_upstream.__test__ = False  # a function of drift, not a pytest test


def upstream_summary(runs: dict[str, TestRun], mapping: dict[str, list[str]]) -> list[str]:
    """One line per patch: the releases whose unpatched sources pass all its
    tests, the first release from which every later one passes, and for each
    other release what its tests came to (``0.27.0: 2 failed, 1 import error``)."""
    lines = []
    versions = list(runs)
    for p, ids in mapping.items():
        if not ids:
            lines.append(f"  {p}: no tests")
            continue
        passing = [v for v in versions if all(runs[v].outcomes[n] == "passed" for n in ids)]
        since = next((v for i, v in enumerate(versions) if all(w in passing for w in versions[i:])), None)
        line = f"  {p}: {', '.join(passing) or 'none'} (from every release on: {since or 'none'})"
        others = []
        for v in versions:
            if v in passing:
                continue
            counts = [(o, sum(runs[v].outcomes[n] == o for n in ids)) for o in TEST_OUTCOMES if o != "passed"]
            others.append(f"{v}: " + ", ".join(f"{c} {o}" for o, c in counts if c))
        if others:
            line += "; " + "; ".join(others)
        lines.append(line)
    return lines


def outcomes_by_patch(runs: dict[str, TestRun], mapping: dict[str, list[str]]) -> dict:
    """``{version: {patch: {node id: outcome}}}`` of the runs, for the patches of ``mapping``."""
    return {v: {p: {n: r.outcomes[n] for n in ids} for p, ids in mapping.items()} for v, r in runs.items()}


def write_upstream_reports(runs: dict[str, TestRun], mapping: dict[str, list[str]],
                           out_dir: Path = REPORTS) -> tuple[Path, Path]:
    """``drift-upstream.json`` (``{"outcomes": {version: {patch: {node id:
    outcome}}}, "environment": {version: what its tests ran with},
    "output": {version: {test file: pytest's output}}}``) and
    ``drift-upstream.log`` (pytest's output, by release and file) in
    ``out_dir``; returns both paths."""
    data = {"outcomes": outcomes_by_patch(runs, mapping),
            "environment": {v: r.environment for v, r in runs.items()},
            "output": {v: r.output for v, r in runs.items()}}
    log = "".join(f"===== {v}: {path}{f' ({r.environment})' if r.environment else ''}\n{text}\n"
                  for v, r in runs.items() for path, text in r.output.items())
    jpath, lpath = write_reports({"drift-upstream.json": data, "drift-upstream.log": log}, out_dir)
    return jpath, lpath
