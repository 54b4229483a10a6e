"""BGE-M3 offline as its users call it (patch 0017): ``LLM.encode(prompts,
pooling_task="embed&token_classify")`` on a model left at its default
pooling task returns, per prompt, the dense embedding followed by the
sparse weight of every token but the first and last, equal to FlagEmbedding's
recipe on the same weights, on the runner vLLM picks (MRV2, asserted) and on
V1. The checkpoint, the task's engine call and its reference are the matrix
row's (``bge-m3/embed&token_classify`` in ``scripts/validation/matrix/rows.py``);
what this test adds is the engine left at its default pooling task (the matrix
switches tasks on one engine). Before the patch both runners failed on an
``AssertionError`` in ``LLM.encode`` (no front-end processor for the task)."""

from __future__ import annotations

import pytest

from scripts.validation.engine import RUNNER_CHOICE, vllm_runner
from scripts.validation.matrix.rows import case, inputs
from scripts.validation.matrix.runner import ENGINE_DEFAULTS
from scripts.validation.matrix.tasks import max_abs_error

ROW = case("bge-m3")
(TASK,) = [t for t in ROW.tasks if t.name == "embed&token_classify"]


@pytest.fixture(scope="module")
def bge_m3(tmp_path_factory):
    return ROW.make(tmp_path_factory.mktemp("bge-m3") / "model")


@pytest.mark.parametrize("runner", ["MRV2", "V1"])
def test_bge_m3_dense_and_sparse_in_one_call(bge_m3, runner, in_process):
    prompts = inputs(TASK.inputs)
    want = TASK.reference(bge_m3, prompts)
    with vllm_runner(bge_m3, RUNNER_CHOICE[runner], want=runner, **ENGINE_DEFAULTS, **ROW.engine) as llm:
        assert llm.pooling_task == "embed&token_classify"
        got = TASK.run(llm, prompts)
    assert [g.shape for g in got] == [w.shape for w in want]
    assert max_abs_error(got, want) <= TASK.tolerance == 1e-4
