"""Real configs for the behavioural unit tests: ``VllmConfig`` objects built
the way an engine builds them (``EngineArgs.create_engine_config``) for local
models, with Triton's availability set by the test. Only public names and
names upstream has too are used, so these tests run unchanged on the
unpatched sources of later releases (``python -m scripts.series.drift test-upstream``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 (BertModel, encoder-only), from its package."""
    from scripts.validation.checkpoints.models import minilm_path

    return str(minilm_path())


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    """A tiny random Qwen3ForCausalLM checkpoint (decoder), MiniLM's tokenizer."""
    from scripts.validation.checkpoints.zoo import make_tiny_qwen3

    return str(make_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3") / "model"))


@pytest.fixture
def real_config(monkeypatch):
    """``real_config(model, runner, triton=True, env=None, **engine_args)``: the
    VllmConfig of an engine for ``model`` with ``runner`` ("pooling" or
    "generate"), Triton seen as ``triton`` (``upstream_names.set_has_triton``) and
    VLLM_USE_V2_MODEL_RUNNER set to ``env`` (unset when None)."""
    from vllm.engine.arg_utils import EngineArgs

    from tests.unit.upstream_names import set_has_triton

    def make(model: str, runner: str, *, triton: bool = True, env: str | None = None, **engine_args):
        set_has_triton(monkeypatch, triton)
        if env is None:
            monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
        else:
            monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
        config = EngineArgs(model=model, runner=runner, **engine_args).create_engine_config()
        assert config.model_config.runner_type == runner
        return config

    return make


@pytest.fixture
def triton(monkeypatch):
    """``triton(available)``: Triton seen as ``available`` for the test
    (``upstream_names.set_has_triton``)."""
    from tests.unit.upstream_names import set_has_triton

    def set_triton(available: bool):
        set_has_triton(monkeypatch, available)

    return set_triton


@pytest.fixture
def vllm_config_log():
    """The messages ``vllm.config.vllm`` logs during the test, in order (vllm's
    loggers do not propagate to the root logger, so caplog does not see them).
    Kept by a filter on that logger, not a handler: from 0.32.0
    ``EngineArgs.create_engine_config`` configures vLLM's logging
    (``dictConfig``), which empties the handlers of the ``vllm`` logger's
    children and leaves their filters; and the logger is set to INFO for the
    test, which 0.32.0's is not before that first configuration (WARNING)."""
    import logging

    from vllm.logger import _print_info_once, _print_warning_once

    records: list[str] = []

    def keep(record: logging.LogRecord) -> bool:
        records.append(record.getMessage())
        return True

    logger = logging.getLogger("vllm.config.vllm")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addFilter(keep)
    # info_once / warning_once remember what they logged; each test must see its own lines
    _print_info_once.cache_clear()
    _print_warning_once.cache_clear()
    yield records
    logger.removeFilter(keep)
    logger.setLevel(level)


@pytest.fixture
def run_under_interpreter():
    """``run_under_interpreter(path)``: run the test module at ``path`` in a
    fresh pytest process with ``TRITON_INTERPRET=1`` (vLLM decides whether
    Triton is available when it is imported, so the interpreter cannot be
    switched on in this process) and return pytest's outcome counts from its
    summary line, e.g. ``{"passed": 3}`` (warnings left out: they are not
    outcomes). Fails with the run's output when pytest exits non-zero."""
    import os
    import re
    import subprocess
    import sys

    def run(path: str) -> dict[str, int]:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider",
             "-o", "addopts=--strict-markers", "-W", "ignore::DeprecationWarning"],
            env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=1800)
        tail = proc.stdout[-6000:] + proc.stderr[-2000:]
        assert proc.returncode == 0, tail
        # pytest's summary line, e.g. "10 passed, 1 warning in 41.12s"
        summary = re.findall(r"^=*\s*(\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", proc.stdout, re.M)
        assert len(summary) == 1, tail
        counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary[0])}
        return {word: n for word, n in counts.items() if word not in ("warning", "warnings")}

    return run
