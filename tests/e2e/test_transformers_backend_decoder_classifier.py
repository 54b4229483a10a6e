"""Patch 0024 (issue 13, matrix row transformers-cls): a decoder classifier
served by the Transformers modeling backend (``model_impl="transformers"``).

A random-weight ``Qwen3ForSequenceClassification`` (2 layers, hidden 128,
3 labels, pad id 0; MiniLM's tokenizer) as transformers saves it: the head is
``score.weight``. transformers' probabilities are the softmax of the logits of
the last non-padding token of each prompt (``GenericForSequenceClassification``).
On the base the engine failed at start-up on V1 and MRV2 alike ("There is no
module or parameter named 'score'"); with the head loaded it pooled the first
token (the backend's class default "CLS", meaningless on a causal model) and
gave the linear head a [batch, 1, hidden] input. MRV2 (the default) and V1,
1e-4. The engines run in their own processes: the backend decorates
transformers' own ``Qwen3Model`` class for torch.compile in the process that
loads the model, after which this process could not build a Qwen3 of its
own (later tests make tiny Qwen3 checkpoints)."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.validation import references as ref
from scripts.validation.engine import assert_runner, close_llm, open_llm
from scripts.validation.zoo import make_hf

TOL = 1e-4
PROMPTS = ["a cat sleeps on the warm windowsill",
           "the stock market closed higher on friday after a long week of losses",
           "hello"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return make_hf(tmp_path_factory.mktemp("tfcls") / "qwen3-seq-cls", "Qwen3Config",
                   "Qwen3ForSequenceClassification", decoder=True, num_labels=3, pad_token_id=0)


@pytest.fixture(scope="module")
def expected(classifier):
    """transformers' probabilities (softmax of the last non-padding token's logits)."""
    probs = np.asarray(ref.classify(classifier, PROMPTS))
    assert probs.shape == (3, 3)
    return probs


@pytest.mark.parametrize(("runner", "want"), [("default", "MRV2"), ("v1", "V1")])
def test_decoder_classifier_matches_transformers(classifier, expected, runner, want):
    llm = open_llm(classifier, runner=runner, model_impl="transformers")
    try:
        assert_runner(llm, want)
        model_config = llm.llm_engine.vllm_config.model_config
        assert model_config.architecture == "TransformersForSequenceClassification"
        assert model_config.pooler_config.get_seq_pooling_type() == "LAST"
        got = np.asarray([o.outputs.probs for o in llm.classify(PROMPTS, use_tqdm=False)], dtype=np.float32)
    finally:
        close_llm(llm)
    assert got.shape == (3, 3)
    assert abs(got - expected).max() <= TOL
