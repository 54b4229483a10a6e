"""Upstream vLLM's own pooling tests, from the line's pinned sdist, against
the line (``make upstream-tests``)::

    python -m scripts.validation.upstream_pooling [--line L] [--out reports/] [--select NODE ...]

The sdist is the one of the line's own release that the line's ``base.toml``
pins under ``[upstream-sources.*]`` (fetched with pip at run time, verified,
cached; ``scripts.series.base``); its test files are never committed. The
run:

1. **selects** upstream's tests (``SCOPE``, ``KEYWORD``): the test modules
   under ``tests/entrypoints/pooling/``, ``tests/model_executor/`` and
   ``tests/v1/worker/``, ``tests/test_pooling_params.py`` and
   ``tests/models/language/pooling/test_embedding.py`` whose path or source
   says pooling, pooler or late_interaction, and in them the tests pytest's
   ``-k "pooling or pooler or late_interaction"`` keeps (a test's, class's,
   module's or package's name says so);
2. **extracts** into a scratch directory (removed at the end) what they need
   (``needed_files``): the test modules, the ``__init__.py`` and
   ``conftest.py`` on their paths, every ``tests`` module they import,
   transitively, ``tests/``'s data files, the ``examples/`` files they name,
   and upstream's ``pyproject.toml`` (its pytest markers);
3. lays out a Hugging Face cache holding all-MiniLM-L6-v2 (``HF_HOME``;
   ``lay_out_hf_cache``), so that upstream's tests that name
   ``sentence-transformers/all-MiniLM-L6-v2`` run offline;
4. **runs** them with pytest in the line's venv: the line's applied tree
   (``.build/lines/<line>``) first on ``PYTHONPATH``, then the scratch
   directory, in Python's safe-path mode, in the environment of upstream's
   CPU CI (``UPSTREAM_CPU_ENV``); the plugin
   ``scripts.validation.upstream_plugin`` records each outcome and the
   ``vllm`` imported (the job refuses a run that did not import the line's);
   the packages of upstream's harness the venv lacks (``HARNESS``) come at
   upstream's own pins
   (``requirements/test/cpu.txt`` of the sdist), installed once into the
   download cache;
5. **leaves out** a test that upstream skips here (its own ``skipif``: no
   CUDA, no ROCm, ...) or that stops because the Hugging Face hub or the
   network is out of reach (a hub model other than MiniLM; the plugin
   reports it skipped, naming the model or host), each with its reason;
6. runs **every failure again on unpatched vLLM** of the same release (the
   base wheel's files, ``scripts.series.tree.build_tree`` with no patch): a
   test that fails there too is upstream's own, one that fails only on the
   line is a defect of the line (exit status 1);
7. writes ``reports/upstream-pooling.md`` and ``upstream-pooling.json``
   (``classify``, ``write_reports``), pytest's output to
   ``reports/logs/upstream-pooling.log``.

Exit status 0 when no test fails only on the line, 1 when one does, 2 when
the run cannot be prepared (no sdist of the release pinned, the line's tree
not applied, pytest not importing the expected ``vllm``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scripts.common.paths import BUILD, REPO, REPORTS
from scripts.common.reports import write_reports
from scripts.series.base import Base, BaseError, UpstreamSources, cache_dir, fetch, load_base
from scripts.series.tree import build_tree, tree_state, version_file
from scripts.validation import upstream_plugin
from scripts.validation.upstream_plugin import RESULTS_ENV

# What issue 25 names, relative to the sdist's top directory: directories (every
# test module under them) and test modules.
SCOPE = ("tests/entrypoints/pooling", "tests/model_executor", "tests/v1/worker", "tests/test_pooling_params.py",
         "tests/models/language/pooling/test_embedding.py")
# pytest -k: the tests whose own, class, module or package names say so (within SCOPE).
KEYWORD = "pooling or pooler or late_interaction"
# A module of SCOPE is collected only when its path or source says one of KEYWORD's words:
# no test of the others could be selected, and collecting them (GPU kernels, loaders) costs minutes.
_MENTIONS = re.compile("|".join(KEYWORD.split(" or ")), re.I)
# Upstream's test requirements its harness imports that the line's venv does not hold:
# tests/conftest.py imports tblib; the asyncio tests need pytest-asyncio's plugin. The
# versions are upstream's pins (HARNESS_PINS of the sdist).
HARNESS = ("tblib", "pytest-asyncio")
HARNESS_PINS = "requirements/test/cpu.txt"
PLUGIN = upstream_plugin.__name__
# The environment upstream's CPU CI runs its tests in (the sdist's
# .buildkite/scripts/hardware_ci/run-cpu-test.sh): no warm-up, eager dynamo, and an
# explicit KV cache in GiB (16 on upstream's agents; 1 here: the tests' models are
# small). Without it the CPU worker reserves gpu_memory_utilization (0.92 by default)
# of the machine's memory and refuses to start when less is free.
UPSTREAM_CPU_ENV = {"VLLM_CPU_CI_ENV": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
REPORT = "upstream-pooling"
RUN_TIMEOUT = 3600  # seconds, each pytest run


class UpstreamTestsError(RuntimeError):
    """The run cannot be prepared, or did not import the ``vllm`` it must test."""


@dataclass(frozen=True)
class Outcome:
    """A node's outcome in one run: ``passed``, ``failed`` (any phase, or a
    module that did not import) or ``skipped`` (left out: ``message`` is the
    reason); ``message`` is a failure's error line, ``detail`` pytest's report."""

    node: str
    outcome: str
    message: str = ""
    detail: str = ""


@dataclass
class Run:
    """One pytest run: each node's ``Outcome``, the ``vllm`` it imported
    (``__file__``, ``__version__``), pytest's exit status (None: timed out),
    its wall time in seconds."""

    outcomes: dict[str, Outcome]
    vllm_file: str
    vllm_version: str
    returncode: int | None
    seconds: float


@dataclass
class Verdict:
    """What the runs come to: the node ids that passed on the line; those
    failing on the line and on unpatched vLLM (``upstream_own``: node -> both
    error lines, ``{"line": ..., "unpatched": ...}``); those failing only on
    the line (``line_only``: node -> ``{"line": error line, "unpatched": what
    it did there}``); those left out (``left_out``: reason -> node ids)."""

    passed: list[str] = field(default_factory=list)
    upstream_own: dict[str, dict[str, str]] = field(default_factory=dict)
    line_only: dict[str, dict[str, str]] = field(default_factory=dict)
    left_out: dict[str, list[str]] = field(default_factory=dict)

    @property
    def selected(self) -> int:
        """How many nodes the verdict covers."""
        return len(self.passed) + len(self.upstream_own) + len(self.line_only) + sum(map(len, self.left_out.values()))


def release_sdist(base: Base) -> tuple[str, UpstreamSources]:
    """The ``[upstream-sources.<name>]`` of ``base`` that pins the source
    distribution of the base's own release (``Base.release_sdist``), with
    its name. Raises ``UpstreamTestsError`` when ``base.toml`` pins none."""
    try:
        sources = base.release_sdist()
    except BaseError as e:
        raise UpstreamTestsError(f"{e}: upstream's tests run from the sdist of the line's own release") from None
    return next(name for name, s in base.upstream.items() if s is sources), sources


def read_sdist(sdist: Path) -> dict[str, bytes]:
    """The files of ``sdist`` a run may need, by path relative to its top
    directory: everything under ``tests/`` and ``examples/``,
    ``pyproject.toml`` and ``HARNESS_PINS``. One pass over the archive."""
    files = {}
    with tarfile.open(sdist) as tar:
        for member in tar:
            if not member.isfile():
                continue
            rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if rel.startswith(("tests/", "examples/")) or rel in ("pyproject.toml", HARNESS_PINS):
                f = tar.extractfile(member)
                files[rel] = f.read() if f else b""
    return files


def in_scope(path: str) -> bool:
    """Whether ``path`` (relative to the sdist's top) is one of ``SCOPE``'s
    modules or under one of its directories."""
    return any(path == s or path.startswith(s.rstrip("/") + "/") for s in SCOPE)


def candidate_modules(files: dict[str, bytes]) -> list[str]:
    """The test modules (``test_*.py``) of ``files`` in ``SCOPE`` whose path
    or source mentions pooling, pooler or late_interaction."""
    return sorted(p for p, data in files.items()
                  if in_scope(p) and Path(p).name.startswith("test_") and p.endswith(".py")
                  and (_MENTIONS.search(p) or _MENTIONS.search(data.decode(errors="replace"))))


def _module_path(files: dict[str, bytes], dotted: str) -> str | None:
    stem = dotted.replace(".", "/")
    return next((p for p in (f"{stem}.py", f"{stem}/__init__.py") if p in files), None)


def imported_modules(path: str, source: str) -> set[str]:
    """The dotted names a module at ``path`` (relative to the sdist's top)
    imports, anywhere in it, relative imports resolved (``from ...utils
    import x`` in ``tests/a/b/c/m.py`` is ``tests.a.utils`` and, should ``x``
    be a module, ``tests.a.utils.x``). Raises ``SyntaxError`` for a module
    that does not parse."""
    package = path.split("/")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                module = ".".join(parts)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def needed_files(files: dict[str, bytes], tests: Iterable[str]) -> list[str]:
    """What the test modules ``tests`` need of ``files`` (``read_sdist``):
    themselves; every ``conftest.py`` from ``tests/`` down to each one's
    directory (pytest loads them); every ``tests`` module they import,
    transitively (``imported_modules``), with each module's packages'
    ``__init__.py``; the ``examples/`` files they name in a string literal;
    every file under ``tests/`` that is not Python (prompts, configs,
    fixtures); ``pyproject.toml`` (upstream's pytest markers). Sorted paths."""
    need: set[str] = set()
    queue = []
    for test in tests:
        queue.append(test)
        parts = test.split("/")[:-1]
        queue += [c for i in range(1, len(parts) + 1) if (c := "/".join(parts[:i] + ["conftest.py"])) in files]
    while queue:
        path = queue.pop()
        if path in need:
            continue
        need.add(path)
        parts = path.split("/")[:-1]
        queue += [i for n in range(1, len(parts) + 1) if (i := "/".join(parts[:n] + ["__init__.py"])) in files]
        source = files[path].decode(errors="replace")
        for name in imported_modules(path, source):
            if name == "tests" or name.startswith("tests."):
                module = _module_path(files, name)
                if module:
                    queue.append(module)
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in files \
                    and node.value.startswith("examples/"):
                need.add(node.value)
    need.update(p for p in files if p.startswith("tests/") and not p.endswith(".py"))
    need.update(p for p in ("pyproject.toml",) if p in files)
    return sorted(need)


def extract(files: dict[str, bytes], names: Iterable[str], dest: Path) -> None:
    """Write ``names`` of ``files`` under ``dest`` at their paths."""
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(files[name])


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def harness_requirements(files: dict[str, bytes]) -> list[str]:
    """``name==version`` of each ``HARNESS`` package this interpreter does
    not have, the version upstream's ``HARNESS_PINS`` pins. Raises
    ``UpstreamTestsError`` when the sdist pins one of them not."""
    pins = {_canonical(m.group(1)): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==(\S+)", files.get(HARNESS_PINS, b"").decode(), re.M)}
    out = []
    for name in HARNESS:
        try:
            importlib.metadata.version(name)
            continue
        except importlib.metadata.PackageNotFoundError:
            pass
        if _canonical(name) not in pins:
            raise UpstreamTestsError(f"the sdist's {HARNESS_PINS} pins no {name}, which upstream's tests need")
        out.append(f"{name}=={pins[_canonical(name)]}")
    return out


def harness_site(requirements: list[str], cache: Path | None = None) -> Path | None:
    """A directory holding ``requirements`` (``pip install --no-deps
    --target``), kept in the download cache (``<cache>/upstream-tests/``,
    one directory per set of pins) and reused; None when there is nothing to
    install. Raises ``UpstreamTestsError`` when pip fails."""
    if not requirements:
        return None
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12]
    root = (cache or cache_dir()) / "upstream-tests"
    site = root / f"site-{digest}"
    if (site / ".complete").exists():
        return site
    root.mkdir(parents=True, exist_ok=True)
    print(f"installing {', '.join(requirements)} (upstream's pins) into {site}", flush=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".install-"))
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(tmp),
                               *requirements], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise UpstreamTestsError(f"pip could not install {requirements}:\n{proc.stdout[-3000:]}")
        (tmp / ".complete").write_text("\n".join(requirements) + "\n")
        shutil.rmtree(site, ignore_errors=True)
        os.rename(tmp, site)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return site


def hf_revision(source: Path) -> str:
    """A 40-hex revision naming the files of ``source`` (sha1 over each
    file's relative path and sha256): the commit a laid-out cache's
    ``refs/main`` names."""
    h = hashlib.sha1()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        h.update(path.relative_to(source).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def lay_out_hf_cache(hf_home: Path, repo_id: str, source: Path) -> Path:
    """Lay out ``hf_home/hub`` as the Hugging Face cache holding the model
    repo ``repo_id`` with the files of the directory ``source``:
    ``models--<org>--<name>/refs/main`` naming the revision ``hf_revision``
    and ``snapshots/<revision>/`` holding a symlink to each file, so that
    ``HF_HOME=hf_home`` and ``HF_HUB_OFFLINE=1`` resolve ``repo_id`` (what
    huggingface_hub's ``snapshot_download`` and ``hf_hub_download`` read
    offline). Returns the snapshot directory."""
    revision = hf_revision(source)
    repo = Path(hf_home) / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        link = snapshot / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(path.resolve())
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def unpatched_tree(base: Base, dest: Path) -> Path:
    """``dest/vllm``: the base's cpu wheel extracted as the series tooling
    builds a tree (``build_tree``: its bundled libraries under ``libs/``),
    with no patch applied, its ``_version.py`` the release's own version.
    Returns the tree."""
    tree = build_tree(base, "cpu", dest, names=[])
    (tree / "_version.py").write_text(version_file(base.version))
    return tree


def node_outcomes(records: list[dict]) -> dict[str, Outcome]:
    """Each node's ``Outcome`` from the plugin's ``result`` records (one per
    phase, or one per module at collection): ``failed`` when a phase failed
    (its phase named unless it was the call), else ``skipped`` when one was
    skipped (the reason), else ``passed`` when the call passed, else
    ``failed`` (the run ended during the test)."""
    phases: dict[str, list[dict]] = {}
    for r in records:
        if r.get("kind") == "result":
            phases.setdefault(r["node"], []).append(r)
    out = {}
    for node, rs in phases.items():
        failed = [r for r in rs if r["outcome"] == "failed"]
        skipped = [r for r in rs if r["outcome"] == "skipped"]
        if failed:
            r = failed[0]
            where = "" if r["when"] == "call" else f"({'does not import' if r['when'] == 'collect' else r['when']}) "
            out[node] = Outcome(node, "failed", where + r["message"], r.get("detail", ""))
        elif skipped:
            out[node] = Outcome(node, "skipped", skipped[0]["message"])
        elif any(r["when"] == "call" and r["outcome"] == "passed" for r in rs):
            out[node] = Outcome(node, "passed")
        else:
            out[node] = Outcome(node, "failed", "the run ended during the test")
    return out


def run_upstream_tests(tree_root: Path, scratch: Path, site: Path | None, hf_home: Path, nodes: list[str],
                       log: Path, label: str, timeout: int = RUN_TIMEOUT) -> Run:
    """pytest on ``nodes`` (paths or node ids relative to ``scratch``, with
    ``-k KEYWORD``) in a child of this interpreter (the line's venv), with
    ``tree_root`` (holding ``vllm/``) first on ``PYTHONPATH``, then
    ``scratch``, then ``site`` and this repository (for the plugin), in
    Python's safe-path mode, ``HF_HOME=hf_home``, ``HF_HUB_OFFLINE=1`` and
    upstream's CPU CI environment (``UPSTREAM_CPU_ENV``).
    pytest's output is appended to ``log`` under ``label``. Each selected
    node gets an ``Outcome`` (``node_outcomes``; one with no result at all is
    ``failed``: the run ended first). Raises ``UpstreamTestsError``
    when pytest recorded no ``vllm`` (its start-up failed: the log says why)."""
    results = scratch / f".results-{label.split()[0]}.jsonl"
    results.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    env.update(UPSTREAM_CPU_ENV)
    env.update(PYTHONSAFEPATH="1", HF_HUB_OFFLINE="1", HF_HOME=str(hf_home), TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(str(p) for p in (tree_root, scratch, site, REPO) if p is not None),
               **{RESULTS_ENV: str(results)})
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", PLUGIN, "--rootdir", str(scratch),
           "-c", str(scratch / "pyproject.toml"), "--continue-on-collection-errors", "-k", KEYWORD, *nodes]
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "a") as out:
        out.write(f"===== {label}\n$ {' '.join(cmd[1:])}\n")
        out.flush()
        try:
            code = subprocess.run(cmd, cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
            out.write(f"\n[upstream_pooling: pytest timed out after {timeout} s]\n")
    seconds = time.monotonic() - start
    records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    vllm = next((r for r in records if r.get("kind") == "vllm"), None)
    if vllm is None or "error" in vllm:
        raise UpstreamTestsError(f"{label}: pytest did not import vllm "
                                 f"({vllm['error'] if vllm else 'it stopped before its session began'}); see {log}")
    outcomes = node_outcomes(records)
    selected = [n for r in records if r.get("kind") == "selected" for n in r["nodes"]]
    for node in selected:
        outcomes.setdefault(node, Outcome(node, "failed", f"no result: pytest ended (exit status {code}) first"))
    return Run(outcomes, vllm["file"], vllm["version"], code, seconds)


def classify(line: dict[str, Outcome], unpatched: dict[str, Outcome]) -> Verdict:
    """The verdict of the line's run (``line``) given the run of its failures
    on unpatched vLLM (``unpatched``): a node passed on the line is passed;
    skipped, left out under its reason; failed, upstream's own when it
    failed on unpatched vLLM too (with both error lines), else a failure
    only on the line (with its error line, and ``passed``, ``skipped: <reason>``
    or ``not run`` for unpatched vLLM). A module that did not import on the
    line (its node id is its path) and whose tests ran on unpatched vLLM
    imported there: ``passed``."""
    verdict = Verdict()
    for node, outcome in sorted(line.items()):
        if outcome.outcome == "passed":
            verdict.passed.append(node)
        elif outcome.outcome == "skipped":
            verdict.left_out.setdefault(outcome.message, []).append(node)
        else:
            there = unpatched.get(node)
            if there is None and "::" not in node and any(k.startswith(node + "::") for k in unpatched):
                there = Outcome(node, "passed", "imports")  # a module that did not import on the line
            if there is not None and there.outcome == "failed":
                verdict.upstream_own[node] = {"line": outcome.message, "unpatched": there.message}
            else:
                what = "not run" if there is None else there.outcome + (f": {there.message}"
                                                                         if there.outcome == "skipped" else "")
                verdict.line_only[node] = {"line": outcome.message, "unpatched": what}
    return verdict


def _module_of(node: str) -> str:
    return node.split("::")[0]


def render(verdict: Verdict, facts: dict) -> tuple[str, dict]:
    """``upstream-pooling.md`` and ``upstream-pooling.json`` for ``verdict``
    and the run's ``facts`` (line, sdist, the vllm each run imported, the
    selection, times)."""
    counts = {"selected": verdict.selected, "passed": len(verdict.passed),
              "failed as upstream's own": len(verdict.upstream_own),
              "failed only on the line": len(verdict.line_only),
              "left out": sum(map(len, verdict.left_out.values()))}
    data = {**facts, "counts": counts, "line_only": verdict.line_only, "upstream_own": verdict.upstream_own,
            "left_out": verdict.left_out, "passed": verdict.passed}
    line, version = facts["line"], facts["release"]
    md = [f"# Upstream vLLM {version}'s pooling tests on line {line}", "",
          f"Upstream's own tests, unmodified, from `{facts['sdist']}` (the line's `base.toml`, "
          f"`[upstream-sources.{facts['sdist_table']}]`), run offline on the CPU "
          "(`python -m scripts.validation.upstream_pooling`; docs/validation.md).", "",
          "| run | `vllm` imported | version | pytest exit | seconds |", "| --- | --- | --- | --- | --- |"]
    for name, run in facts["runs"].items():
        md.append(f"| {name} | `{run['vllm_file']}` | {run['vllm_version']} | {run['returncode']} | "
                  f"{run['seconds']:.0f} |")
    md += ["", f"Selection: the test modules under {', '.join(f'`{s}`' for s in SCOPE)} whose path or source "
           f"says pooling, pooler or late_interaction ({len(facts['modules'])} modules), "
           f"`-k \"{KEYWORD}\"`.", "",
           "| " + " | ".join(counts) + " |", "| " + " | ".join("---" for _ in counts) + " |",
           "| " + " | ".join(str(v) for v in counts.values()) + " |", ""]
    md += ["## Failed only on the line (defects of the line)", ""]
    md += [f"- `{n}`: {v['line']} (unpatched {version}: {v['unpatched']})"
           for n, v in verdict.line_only.items()] or ["None."]
    md += ["", f"## Failed on unpatched {version} too (upstream's own)", ""]
    md += [f"- `{n}`: {v['unpatched']}" + ("" if v["line"] == v["unpatched"] else f" (on the line: {v['line']})")
           for n, v in verdict.upstream_own.items()] or ["None."]
    md += ["", "The error line is unpatched vLLM's; the line's follows when it differs."] if verdict.upstream_own else []
    md += ["", "## Left out, by reason", "",
           "A module that does not import offline counts once, under its own path.", "",
           "| reason | tests | modules |", "| --- | --- | --- |"]
    for reason, nodes in sorted(verdict.left_out.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        modules = sorted({_module_of(n) for n in nodes})
        shown = ", ".join(f"`{m.removeprefix('tests/')}`" for m in modules[:4]) + (
            f" and {len(modules) - 4} more" if len(modules) > 4 else "")
        label = reason if reason.startswith("offline: ") else f"upstream skips it: {reason}"
        md.append(f"| {label.replace('|', '/')} | {len(nodes)} | {shown} |")
    md += ["", f"Passed: {len(verdict.passed)} (their node ids: `{REPORT}.json`). Total run time: "
           f"{facts['seconds']:.0f} s.", ""]
    return "\n".join(md), data


def _print_summary(verdict: Verdict, version: str) -> None:
    print(f"selected {verdict.selected}: passed {len(verdict.passed)}, failed as upstream's own "
          f"{len(verdict.upstream_own)}, failed only on the line {len(verdict.line_only)}, left out "
          f"{sum(map(len, verdict.left_out.values()))}")
    for node, v in verdict.line_only.items():
        print(f"  FAILED ONLY ON THE LINE {node}: {v['line']} (unpatched {version}: {v['unpatched']})")
    for node, v in verdict.upstream_own.items():
        print(f"  upstream's own {node}: {v['unpatched']}"
              + ("" if v["line"] == v["unpatched"] else f" (on the line: {v['line']})"))
    for reason, nodes in sorted(verdict.left_out.items(), key=lambda kv: -len(kv[1])):
        print(f"  left out ({len(nodes)}): {reason}")


def _check_vllm(run: Run, tree: Path, what: str) -> None:
    if Path(run.vllm_file).resolve().parent != tree.resolve():
        raise UpstreamTestsError(f"the {what} run imported vllm from {run.vllm_file}, not from {tree}")


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring). Returns the exit status."""
    from scripts.validation.checkpoints.models import MINILM_REPO, minilm_path

    parser = argparse.ArgumentParser(prog="python -m scripts.validation.upstream_pooling",
                                     description="Upstream vLLM's pooling tests from the line's sdist, on the line")
    parser.add_argument("--line", help="the line (default: $VDIST_LINE, else patches/lines.toml's default)")
    parser.add_argument("--out", type=Path, default=REPORTS, help="reports directory (default: reports/)")
    parser.add_argument("--select", nargs="+", metavar="NODE",
                        help="only these test modules or node ids (relative to the sdist's top, within the scope)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        base = load_base(args.line)
        tree = BUILD / "lines" / base.line / "vllm"
        state = tree_state(tree, base, "cpu")
        if state != "current":
            raise UpstreamTestsError(f"the line's applied tree {tree} is {state}: make LINE={base.line} tree")
        table, pin = release_sdist(base)
        sdist = fetch(pin)
        files = read_sdist(sdist)
        modules = candidate_modules(files)
        nodes = args.select or modules
        outside = [n for n in nodes if _module_of(n) not in modules]
        if outside:
            raise UpstreamTestsError(f"--select names what is not a selected module of the scope: {outside}")
        log = args.out / "logs" / f"{REPORT}.log"
        log.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="upstream-pooling-") as tmp:
            scratch = Path(tmp) / "src"
            names = needed_files(files, sorted({_module_of(n) for n in nodes}))
            extract(files, names, scratch)
            hf_home = Path(tmp) / "hf-home"
            lay_out_hf_cache(hf_home, MINILM_REPO, minilm_path())
            site = harness_site(harness_requirements(files))
            print(f"line {base.line}: {len(modules)} upstream test modules from {sdist.name} ({len(names)} files "
                  f"extracted); pytest's output: {log}", flush=True)
            line_run = run_upstream_tests(tree.parent, scratch, site, hf_home, nodes, log, f"line {base.line}")
            _check_vllm(line_run, tree, f"line {base.line}")
            print(f"line {base.line}: vllm {line_run.vllm_version} from {line_run.vllm_file}: "
                  f"{len(line_run.outcomes)} tests in {line_run.seconds:.0f} s", flush=True)
            runs = {f"line {base.line}": line_run}
            failed = [n for n, o in line_run.outcomes.items() if o.outcome == "failed"]
            unpatched: dict[str, Outcome] = {}
            if failed:
                print(f"unpatched vLLM {base.version}: the {len(failed)} failures again", flush=True)
                bare = unpatched_tree(base, Path(tmp) / "unpatched")
                base_run = run_upstream_tests(bare.parent, scratch, site, hf_home, failed, log,
                                              f"unpatched {base.version}")
                _check_vllm(base_run, bare, f"unpatched {base.version}")
                runs[f"unpatched {base.version}"] = base_run
                unpatched = base_run.outcomes
    except (UpstreamTestsError, BaseError) as e:
        print(f"upstream_pooling: {e}", file=sys.stderr)
        return 2
    verdict = classify(line_run.outcomes, unpatched)
    facts = {"line": base.line, "release": base.version, "sdist": pin.filename, "sdist_table": table,
             "scope": list(SCOPE), "keyword": KEYWORD, "modules": modules, "select": args.select or [],
             "runs": {name: {"vllm_file": r.vllm_file, "vllm_version": r.vllm_version, "returncode": r.returncode,
                             "seconds": round(r.seconds, 1)} for name, r in runs.items()},
             "seconds": round(time.monotonic() - start, 1),
             "details": {n: line_run.outcomes[n].detail for n in verdict.line_only}}
    md, data = render(verdict, facts)
    paths = write_reports({f"{REPORT}.md": md, f"{REPORT}.json": data}, args.out)
    _print_summary(verdict, base.version)
    print(f"reports: {', '.join(str(p) for p in paths)}")
    return 1 if verdict.line_only else 0


if __name__ == "__main__":
    sys.exit(main())
