"""Issue 28 item 2 (patch 0045): the sequence pooling methods that compute
sentence-transformers' pooling modes ``max``, ``mean_sqrt_len_tokens`` and
``weightedmean`` (vLLM's ``MAX``, ``MEAN_SQRT_LEN``, ``WEIGHTEDMEAN``), taken
from the pooler's own registry (``get_seq_pooling_method``) and run on a step
of four prompts of different lengths laid out as both runners lay them out
(the prompts' hidden states one after another), against
sentence-transformers' ``Pooling`` module on the same hidden states padded
into a batch with an attention mask (fp32, 1e-6). ``weightedmean`` weighs
the i-th token of a prompt (from 1) by i, wherever the prompt sits in the
step. The existing ``CLS``, ``LAST`` and ``MEAN`` are checked the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

LENGTHS = [3, 7, 1, 5]
HIDDEN = 16
MODES = {"max": "MAX", "mean_sqrt_len_tokens": "MEAN_SQRT_LEN", "weightedmean": "WEIGHTEDMEAN",
         "cls": "CLS", "lasttoken": "LAST", "mean": "MEAN"}


@pytest.fixture(scope="module")
def prompts():
    """One fp32 [length, HIDDEN] tensor of hidden states a prompt."""
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(n, HIDDEN, generator=generator) for n in LENGTHS]


def sentence_transformers_pooling(prompts, mode: str) -> torch.Tensor:
    """sentence-transformers' ``Pooling(mode)`` of the prompts padded on the right."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    longest = max(LENGTHS)
    padded = torch.zeros(len(prompts), longest, HIDDEN)
    mask = torch.zeros(len(prompts), longest, dtype=torch.int64)
    for i, p in enumerate(prompts):
        padded[i, : len(p)] = p
        mask[i, : len(p)] = 1
    features = Pooling(HIDDEN, mode)({"token_embeddings": padded, "attention_mask": mask})
    return features["sentence_embedding"]


def vllm_pooling(prompts, pooling_type: str) -> torch.Tensor:
    """The registry's method for ``pooling_type`` on the prompts' step."""
    from vllm.model_executor.layers.pooler.seqwise.methods import get_seq_pooling_method
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

    lengths = torch.tensor(LENGTHS)
    metadata = PoolingMetadata(prompt_lens=lengths, prompt_token_ids=None, prompt_token_ids_cpu=None,
                               pooling_params=[PoolingParams(task="embed") for _ in LENGTHS],
                               pooling_states=[PoolingStates() for _ in LENGTHS])
    metadata.build_pooling_cursor(np.array(LENGTHS), lengths, torch.device("cpu"))
    return get_seq_pooling_method(pooling_type)(torch.cat(prompts), metadata)


@pytest.mark.parametrize("mode", MODES)
def test_pooling_method_is_sentence_transformers_pooling(prompts, mode):
    got = vllm_pooling(prompts, MODES[mode])
    expected = sentence_transformers_pooling(prompts, mode)
    assert got.shape == expected.shape == (len(LENGTHS), HIDDEN)
    torch.testing.assert_close(got.float(), expected, rtol=0, atol=1e-6)


def test_weighted_mean_weighs_positions_from_one():
    # one prompt of two tokens [1, ...] and [4, ...]: (1*1 + 2*4) / (1 + 2) = 3
    from vllm.model_executor.layers.pooler.seqwise.methods import get_seq_pooling_method
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

    lengths = torch.tensor([1, 2])
    metadata = PoolingMetadata(prompt_lens=lengths, prompt_token_ids=None, prompt_token_ids_cpu=None,
                               pooling_params=[PoolingParams(task="embed")] * 2,
                               pooling_states=[PoolingStates(), PoolingStates()])
    metadata.build_pooling_cursor(np.array([1, 2]), lengths, torch.device("cpu"))
    hidden = torch.tensor([[7.0, 7.0], [1.0, 2.0], [4.0, 8.0]])
    got = get_seq_pooling_method("WEIGHTEDMEAN")(hidden, metadata)
    torch.testing.assert_close(got.float(), torch.tensor([[7.0, 7.0], [3.0, 6.0]]))


@pytest.mark.parametrize("pooling_type", ["MAX", "MEAN_SQRT_LEN", "WEIGHTEDMEAN"])
def test_partial_prefill_is_refused(pooling_type):
    from vllm.model_executor.layers.pooler.seqwise.methods import get_seq_pooling_method
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

    metadata = PoolingMetadata(prompt_lens=torch.tensor([4]), prompt_token_ids=None, prompt_token_ids_cpu=None,
                               pooling_params=[PoolingParams(task="embed")], pooling_states=[PoolingStates()])
    metadata.build_pooling_cursor(np.array([2]), torch.tensor([2]), torch.device("cpu"))
    with pytest.raises(RuntimeError, match=f"partial prefill is not supported with {pooling_type} pooling"):
        get_seq_pooling_method(pooling_type)(torch.zeros(2, HIDDEN), metadata)
