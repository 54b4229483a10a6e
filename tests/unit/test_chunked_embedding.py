"""Long-text embeddings with ``enable_chunked_processing`` (issue 18 item 3,
patch 0022), without an engine: the server's embedding io-processor
(``EmbedIOProcessor`` over the renderer of a real all-MiniLM-L6-v2 config,
``max_model_len=128``) splits a 398-token input into 4 chunks; a stand-in
engine pools each chunk as the embed pooler does with the chunk's pooling
parameters (mean of transformers' last hidden state, L2-normalised when the
chunk's ``use_activation`` says so); the io-processor combines them by token
count. With the activation on (unset or True) the result must be that
combination normalised again, transformers' value
``normalize(sum_i n_i * normalize(mean_i))``; off, the raw combination
``sum_i n_i * mean_i / sum_i n_i`` (the mean over all 398 tokens). Before
0022 the combination of unit vectors was returned as it was (not unit
length). A pooler whose embed activation is not L2 normalisation (SPLADE's
sparse vectors) is combined and left as it is. The same rows run through
both runners in ``tests/e2e/test_fault_long_text.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.unit.upstream_names import chat_template_config, serve_context, server_pre_process

MAX_MODEL_LEN = 128
NUM_TOKENS = 398
TOL = 1e-4


@pytest.fixture(scope="module")
def long_input():
    from transformers import AutoTokenizer

    from scripts.validation.checkpoints.models import minilm_path, sts_test

    tok = AutoTokenizer.from_pretrained(str(minilm_path()))
    words = tok(" ".join(sts_test().sentences[:60]), add_special_tokens=False)["input_ids"]
    return [tok.cls_token_id] + words[:NUM_TOKENS - 2] + [tok.sep_token_id]


@pytest.fixture(scope="module")
def chunk_states(long_input):
    """transformers' last hidden state of each 128-token chunk, run alone."""
    from scripts.validation.engine import forward
    from scripts.validation.checkpoints.models import minilm_path

    chunks = [long_input[i:i + MAX_MODEL_LEN] for i in range(0, NUM_TOKENS, MAX_MODEL_LEN)]
    return {tuple(c): s for c, s in zip(chunks, forward(minilm_path(), chunks))}


@pytest.fixture(scope="module")
def io_processor():
    """The embedding io-processor the server builds for this config (one
    config for the module: the runner plays no part here)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.pooling.embed.io_processor import EmbedIOProcessor
    from vllm.renderers import renderer_from_config

    from scripts.validation.checkpoints.models import minilm_path

    config = EngineArgs(model=str(minilm_path()), runner="pooling", max_model_len=MAX_MODEL_LEN,
                        pooler_config={"enable_chunked_processing": True}).create_engine_config()
    return EmbedIOProcessor(config, renderer_from_config(config), chat_template_config())


def reference(chunk_states, normalised_chunks: bool, normalise_result: bool) -> np.ndarray:
    """Token-count-weighted mean of the chunk vectors (each chunk's mean
    hidden state, L2-normalised when ``normalised_chunks``), L2-normalised
    when ``normalise_result``."""
    vectors = [s.mean(axis=0) for s in chunk_states.values()]
    if normalised_chunks:
        vectors = [v / np.linalg.norm(v) for v in vectors]
    weights = [len(k) for k in chunk_states]
    combined = sum(w * v for w, v in zip(weights, vectors)) / sum(weights)
    return combined / np.linalg.norm(combined) if normalise_result else combined


@pytest.mark.parametrize("use_activation, pooler_normalises", [
    (None, True), (True, True), (False, True), (True, False)],
    ids=["default", "normalize", "raw", "pooler-without-normalisation"])
def test_chunked_embedding_gets_the_requests_normalisation(io_processor, long_input, chunk_states,
                                                           use_activation, pooler_normalises):
    from vllm.entrypoints.pooling.embed.protocol import EmbeddingCompletionRequest
    from vllm.outputs import PoolingOutput, PoolingRequestOutput

    io = io_processor
    request = EmbeddingCompletionRequest(model="minilm", input=long_input, use_activation=use_activation)
    ctx = serve_context(request, "minilm", "r", io.create_pooling_params(request))
    inputs = server_pre_process(io, ctx)
    assert [len(ids) for ids, _ in inputs] == [128, 128, 128, 14]

    params = inputs[0][1]  # one set for every chunk, as the server sends it
    activation = bool(params.use_activation) and pooler_normalises
    outputs = []
    for i, (ids, _) in enumerate(inputs):
        pooled = torch.from_numpy(chunk_states[tuple(ids)].mean(axis=0))
        if activation:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        outputs.append(PoolingRequestOutput(request_id=f"r-{i}", outputs=PoolingOutput(data=pooled),
                                            prompt_token_ids=ids, num_cached_tokens=0, finished=True))
    ctx.final_res_batch = outputs
    io.post_process_online(ctx)

    (result,) = ctx.final_res_batch
    expected = reference(chunk_states, normalised_chunks=activation, normalise_result=activation)
    np.testing.assert_allclose(result.outputs.data.numpy(), expected, rtol=0, atol=TOL)
