"""Patch 0055: on the CPU an offline engine (``vllm.LLM``) for a pooling model
runs its engine core in the caller's process, as with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, while its worker keeps a process of its
own (the ``mp`` executor, where the OpenMP binding holds), unless the user set
``VLLM_ENABLE_V1_MULTIPROCESSING``. Before it, every ``LLM`` ran three
processes (front end 832 MiB, engine core 764, worker 1,133 for
all-MiniLM-L6-v2, issue 27); the engine core's process held a third copy of
torch, transformers and vLLM for a step that overlaps nothing with the caller.

``LLMEngine.multiprocess_mode`` is the decision ``LLMEngine.from_engine_args``
and ``from_vllm_config`` (``LLM``'s path) take; the platform's part is
``Platform.engine_core_in_caller_process``."""

from __future__ import annotations

import pytest

VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


def test_pooling_engine_core_runs_in_the_callers_process(real_config, minilm, monkeypatch):
    from vllm.v1.engine.llm_engine import LLMEngine

    monkeypatch.delenv(VAR, raising=False)
    config = real_config(minilm, "pooling")
    assert config.parallel_config.distributed_executor_backend == "mp"  # the worker keeps its process
    assert LLMEngine.multiprocess_mode(config) is False


def test_a_pooling_decoder_runs_its_engine_core_in_the_callers_process(real_config, tiny_qwen3, monkeypatch):
    from vllm.v1.engine.llm_engine import LLMEngine

    monkeypatch.delenv(VAR, raising=False)
    assert LLMEngine.multiprocess_mode(real_config(tiny_qwen3, "pooling")) is False


def test_a_generating_model_keeps_its_engine_core_process(real_config, tiny_qwen3, monkeypatch):
    from vllm.v1.engine.llm_engine import LLMEngine

    monkeypatch.delenv(VAR, raising=False)
    assert LLMEngine.multiprocess_mode(real_config(tiny_qwen3, "generate")) is True


@pytest.mark.parametrize(("value", "separate"), [("1", True), ("0", False)])
def test_the_variable_the_user_set_decides(real_config, minilm, monkeypatch, value, separate):
    from vllm.v1.engine.llm_engine import LLMEngine

    monkeypatch.setenv(VAR, value)
    assert LLMEngine.multiprocess_mode(real_config(minilm, "pooling")) is separate


def test_a_uni_executor_asked_for_becomes_mp_with_the_engine_core_in_the_caller(real_config, minilm, monkeypatch):
    """``distributed_executor_backend="uni"`` with the variable unset: the CPU
    platform moves the worker to the ``mp`` executor (upstream's rule: OpenMP
    needs the worker in its own process), and the engine core stays with the
    caller."""
    from vllm.v1.engine.llm_engine import LLMEngine

    monkeypatch.delenv(VAR, raising=False)
    config = real_config(minilm, "pooling", distributed_executor_backend="uni")
    assert config.parallel_config.distributed_executor_backend == "mp"
    assert LLMEngine.multiprocess_mode(config) is False


def test_other_platforms_keep_the_engine_core_process(real_config, minilm, monkeypatch):
    from vllm.platforms.interface import Platform

    monkeypatch.delenv(VAR, raising=False)
    assert Platform.engine_core_in_caller_process(real_config(minilm, "pooling")) is False
