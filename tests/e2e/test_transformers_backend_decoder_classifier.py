"""Patch 0024 (issue 13): a decoder classifier served by the Transformers
modeling backend (``model_impl="transformers"``): the matrix row
``transformers-cls`` (``scripts/validation/matrix/rows.py``: its checkpoint,
engine options, classify task and reference), and what the row does not
check: the architecture vLLM resolves and the pooling it picks.

The checkpoint: a random-weight ``Qwen3ForSequenceClassification`` (2
layers, hidden 128, 3 labels, pad id 0; MiniLM's tokenizer) as transformers
saves it: the head is ``score.weight``. transformers' probabilities are the
softmax of the logits of the last non-padding token of each prompt
(``GenericForSequenceClassification``). On the base the engine failed at
start-up on V1 and MRV2 alike ("There is no module or parameter named
'score'"); with the head loaded it pooled the first token (the backend's
class default "CLS", meaningless on a causal model) and gave the linear head
a [batch, 1, hidden] input. MRV2 (the default) and V1, 1e-4. The engines run
in their own processes: the backend decorates transformers' own
``Qwen3Model`` class for torch.compile in the process that loads the model,
after which this process could not build a Qwen3 of its own (later tests make
tiny Qwen3 checkpoints)."""

from __future__ import annotations

import pytest

from scripts.validation.engine import vllm_runner
from scripts.validation.matrix.rows import case, inputs
from scripts.validation.matrix.tasks import max_abs_error

ROW = case("transformers-cls")
(TASK,) = ROW.tasks


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return ROW.make(tmp_path_factory.mktemp("tfcls") / "qwen3-seq-cls")


@pytest.fixture(scope="module")
def expected(classifier):
    """transformers' probabilities (softmax of the last non-padding token's logits), one [3] per prompt."""
    probs = TASK.reference(classifier, inputs(TASK.inputs))
    assert [p.shape for p in probs] == [(3,)] * len(inputs(TASK.inputs))
    return probs


@pytest.mark.parametrize("runner", ["default", "v1"])
def test_decoder_classifier_matches_transformers(classifier, expected, runner):
    with vllm_runner(classifier, runner, **ROW.engine) as llm:  # MRV2 by default, V1 asked: asserted
        model_config = llm.llm_engine.vllm_config.model_config
        assert model_config.architecture == "TransformersForSequenceClassification"
        assert model_config.pooler_config.get_seq_pooling_type() == "LAST"
        got = TASK.run(llm, inputs(TASK.inputs))
    assert max_abs_error(got, expected) <= TASK.tolerance == 1e-4
