"""The smoke job's verdict (``scripts.validation.smoke.check``) and the
assertion its engines are opened with (``vllm_runner`` ->
``scripts.validation.engine.assert_runner``): what README says the job
asserts — MRV2 for both rows (MiniLM by default), the input preparation this
machine should use, docs/validation.md's cosine bar. The assertion is checked against
a stand-in for ``vllm.LLM`` whose worker reports a runner class and an input
preparation (``collective_rpc``), as a real worker does."""

from __future__ import annotations

import sys
import types

import pytest

from scripts.validation.engine import assert_runner, expected_input_preparation
from scripts.validation.smoke import check

MRV2_CLASS = "vllm.v1.worker.cpu.model_runner.CPUModelRunner"
V1_CLASS = "vllm.v1.worker.cpu_model_runner.CPUModelRunner"


class Engine:
    """Stands in for ``vllm.LLM``: ``collective_rpc`` answers the two probes
    ``assert_runner`` sends to the worker."""

    def __init__(self, runner_class: str, preparation: str):
        self.answers = {"runner_class": runner_class, "input_preparation_kind": preparation}

    def collective_rpc(self, fn):
        return [self.answers[fn.__name__]]


def row(model="all-MiniLM-L6-v2", min_cosine=0.999999):
    return {"model": model, "runner_requested": "default", "runner": "MRV2 (native)",
            "input_preparation": "native", "min_cosine": min_cosine}


def test_rows_above_the_bar_pass():
    assert check([row(), row(model="tiny-qwen3")]) == []


def test_cosine_under_the_bar_fails():
    assert check([row(min_cosine=0.9999)]) == ["all-MiniLM-L6-v2: min cosine 0.9999000 < 0.99999"]


def test_a_row_whose_engine_assertion_failed_fails_the_job():
    failed = {"model": "tiny-qwen3", "runner_requested": "v2", "failure": "tiny-qwen3 (MRV2 requested): boom"}
    assert check([row(), failed]) == ["tiny-qwen3 (MRV2 requested): boom"]


def test_input_preparation_expected_from_the_interpreter_variable(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert expected_input_preparation() == "triton-interpreter"


def test_input_preparation_expected_without_a_triton_backend(monkeypatch):
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "triton.backends", types.SimpleNamespace(backends={"nvidia": object()}))
    assert expected_input_preparation() == "native"


def test_input_preparation_expected_with_triton_cpu(monkeypatch):
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "triton.backends", types.SimpleNamespace(backends={"cpu": object()}))
    assert expected_input_preparation() == "triton"


def test_mrv2_with_the_expected_input_preparation_passes_the_assertion(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # expected: Triton's interpreter, on any machine
    assert assert_runner(Engine(MRV2_CLASS, "triton-interpreter"), "MRV2") is None


def test_v1_where_mrv2_is_expected_fails_the_assertion():
    with pytest.raises(AssertionError, match="^MRV2 expected, V1 ran$"):
        assert_runner(Engine(V1_CLASS, "native"), "MRV2")


def test_other_input_preparation_fails_the_assertion(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(AssertionError, match="^MRV2 prepared inputs with native, triton-interpreter expected$"):
        assert_runner(Engine(MRV2_CLASS, "native"), "MRV2")
