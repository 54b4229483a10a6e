"""Patch 0010: MRV2 gives an encoder-only cross-encoder the token types of
its sentence pair, as the V1 runner does.

A cross-encoder's score request (``LLM.score``, ``/score``, ``/rerank``)
carries the tokenizer's ``token_type_ids`` compressed to the position of the
first 1 (``PoolingParams.extra_kwargs["compressed_token_type_ids"]``,
entrypoints/pooling/scoring). The V1 runner passes ``token_type_ids`` to the
model for such requests (``_init_model_kwargs``); so does MRV2's
``EncoderOnlyModelState.prepare_inputs``, for models whose ``forward`` takes
them. The expected token types are the MiniLM tokenizer's own for each pair,
in the step's batch order (not the order the requests arrived in).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import vllm.v1.worker.cpu.shm  # noqa: F401  (the CPU worker's set-up)
from vllm.entrypoints.pooling.scoring.utils import compress_token_type_ids
from vllm.pooling_params import PoolingParams
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

from tests.unit.stand_ins import encoder_only_model, forget_layers, minilm_engine_config

# The base's MRV2 model-state internals (0010): a test of the 0.26.0 line; from 0.27.0
# upstream carries it (0010 dropped); the cross-encoder matrix rows check the scores on every line.
pytestmark = pytest.mark.line("0.26.0")

LAYERS = ("encoder.layer.0.attention.attn",)
PAIRS = [("A man is playing a flute.", "A man plays the flute loudly."),
         ("Two dogs run.", "A cat sleeps on the warm mat near the door.")]
SINGLE = "A woman is slicing an onion."


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from scripts.validation.checkpoints.models import minilm_path

    return AutoTokenizer.from_pretrained(str(minilm_path()))


class CrossEncoderLike(torch.nn.Module):
    """Its ``forward`` takes ``token_type_ids``, as BERT's classifiers' does."""

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None,
                token_type_ids=None):
        raise NotImplementedError


@pytest.fixture(scope="module")
def state():
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.model_executor.layers.attention.encoder_only_attention import (
        create_encoder_only_attention_backend,
    )
    from vllm.v1.worker.gpu.model_states import init_model_state

    config = minilm_engine_config()
    model = encoder_only_model(config, create_encoder_only_attention_backend(CPUAttentionBackend), LAYERS,
                               model=CrossEncoderLike())
    yield init_model_state(config, model, None, torch.device("cpu"))
    forget_layers(config, LAYERS)


SLOTS: dict[str, int] = {}


def add(state, req_id, slot, encoding) -> int:
    """Add a request in request slot ``slot`` as the runner does, with the
    pooling params the scoring entrypoint makes for a pair (none for a single
    text); its prompt length."""
    params = PoolingParams(task="classify")
    if "token_type_ids" in encoding and any(encoding["token_type_ids"]):
        params.extra_kwargs = {"compressed_token_type_ids": compress_token_type_ids(encoding["token_type_ids"])}
    SLOTS[req_id] = slot
    state.add_request(slot, SimpleNamespace(req_id=req_id, pooling_params=params, mm_features=[],
                                            prefill_token_ids=encoding["input_ids"],
                                            prompt_token_ids=encoding["input_ids"]))
    return len(encoding["input_ids"])


def batch(req_ids, lens) -> InputBatch:
    """A step scheduling these whole prompts, in this order."""
    n, total = len(lens), sum(lens)
    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    slots = np.asarray([SLOTS[r] for r in req_ids], dtype=np.int32)
    dummy = InputBatch.make_dummy(n, total, InputBuffers(8, 256, torch.device("cpu")))
    return dataclasses.replace(dummy, req_ids=list(req_ids), query_start_loc_np=qsl,
                               idx_mapping_np=slots, idx_mapping=torch.from_numpy(slots),
                               num_scheduled_tokens=np.asarray(lens, dtype=np.int32),
                               num_computed_tokens_np=np.zeros(n, dtype=np.int32))


def test_pairs_get_the_tokenizers_token_types_in_batch_order(state, tokenizer):
    encodings = {"pair-0": tokenizer(*PAIRS[0]), "single": tokenizer(SINGLE), "pair-1": tokenizer(*PAIRS[1])}
    lens = {req_id: add(state, req_id, slot, enc) for slot, (req_id, enc) in enumerate(encodings.items())}
    order = ["pair-1", "single", "pair-0"]  # the step's order, not the arrival order
    inputs = state.prepare_inputs(batch(order, [lens[r] for r in order]), None)
    expected = np.concatenate([np.asarray(encodings[r].get("token_type_ids", [0] * lens[r])) for r in order])
    assert expected.any()  # the pairs have type-1 tokens
    token_type_ids = inputs["token_type_ids"]
    assert token_type_ids.dtype == torch.int32
    np.testing.assert_array_equal(token_type_ids.numpy(), expected)
    for req_id in encodings:
        state.remove_request(req_id)


def test_no_token_types_without_a_pair(state, tokenizer):
    n = add(state, "single-only", 3, tokenizer(SINGLE))
    assert "token_type_ids" not in state.prepare_inputs(batch(["single-only"], [n]), None)
    state.remove_request("single-only")


def test_a_removed_pair_leaves_no_token_types(state, tokenizer):
    n = add(state, "gone", 4, tokenizer(*PAIRS[0]))
    state.remove_request("gone")
    m = add(state, "single-after", 4, tokenizer(SINGLE))
    assert "token_type_ids" not in state.prepare_inputs(batch(["single-after"], [m]), None)
    assert n > 0
    state.remove_request("single-after")
