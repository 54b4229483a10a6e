"""Issue 18, item 3 (patch 0022): long-text embeddings with
``enable_chunked_processing`` get the request's normalisation after the
chunks are combined.

all-MiniLM-L6-v2 (mean pooling, normalised) served with
``max_model_len=128`` and chunked processing; a 398-token input is split into
4 chunks by the server's embedding pre-processing (driven here through the
io-processor ``/v1/embeddings`` builds, on this engine), the chunks run on
the engine, and the server's post-processing combines them by token count.
Before 0022 the combination of the normalised chunk vectors was returned as
it was (not unit length). transformers' value, from each chunk's last hidden
state run alone: with the activation on (unset or True)
``normalize(sum_i n_i * normalize(mean_i))``; off, ``sum_i n_i * mean_i /
sum_i n_i``, the mean over all 398 tokens. V1 and MRV2, 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.validation.engine import forward, l2_normalize, vllm_runner
from scripts.validation.checkpoints.models import minilm_path
from tests.unit.upstream_names import serve_context, server_pre_process

TOL = 1e-4
MAX_MODEL_LEN = 128
NUM_TOKENS = 398


@pytest.fixture(scope="module")
def long_input(sts):
    """398 token ids: [CLS], 396 word pieces of STS-B sentences, [SEP]."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm_path()))
    words = tok(" ".join(sts.sentences[:60]), add_special_tokens=False)["input_ids"]
    ids = [tok.cls_token_id] + words[:NUM_TOKENS - 2] + [tok.sep_token_id]
    assert len(ids) == NUM_TOKENS
    return ids


@pytest.fixture(scope="module")
def chunk_means(long_input):
    """(token count, mean of transformers' last hidden state) of each chunk,
    each chunk of 128 tokens run alone, as the server splits the input."""
    chunks = [long_input[i:i + MAX_MODEL_LEN] for i in range(0, NUM_TOKENS, MAX_MODEL_LEN)]
    assert [len(c) for c in chunks] == [128, 128, 128, 14]
    return [(len(c), s.mean(axis=0)) for c, s in zip(chunks, forward(minilm_path(), chunks))]


def reference(chunk_means, use_activation) -> np.ndarray:
    if use_activation is False:
        return sum(n * m for n, m in chunk_means) / NUM_TOKENS
    return l2_normalize(sum(n * l2_normalize(m) for n, m in chunk_means))


@pytest.fixture(scope="module", params=["v2", "v1"])
def engine(request, in_process):
    """MiniLM with chunked processing on MRV2 (asked) or V1 (``vllm_runner`` asserts which ran)."""
    from vllm.config import PoolerConfig

    with vllm_runner(minilm_path(), request.param, max_model_len=MAX_MODEL_LEN,
                     pooler_config=PoolerConfig(enable_chunked_processing=True)) as llm:
        assert llm.llm_engine.vllm_config.model_config.pooler_config.get_seq_pooling_type() == "MEAN"
        yield llm


def serve_embedding(llm, ids, use_activation):
    """``/v1/embeddings`` for token-id input ``ids``: the server's
    pre-processing (chunking), the chunk requests on this engine, the
    server's post-processing (combination). Returns the vector (float32)
    and the number of engine requests."""
    from vllm.entrypoints.pooling.embed.protocol import EmbeddingCompletionRequest

    io = llm.pooling_io_processors["embed"]
    request = EmbeddingCompletionRequest(model="minilm", input=ids, use_activation=use_activation)
    ctx = serve_context(request, "minilm", "faults18", io.create_pooling_params(request))
    inputs = server_pre_process(io, ctx)
    prompts = [{"prompt_token_ids": ids} for ids, _ in inputs]
    ctx.final_res_batch = llm.encode(prompts, pooling_params=[params for _, params in inputs],
                                     pooling_task="embed", use_tqdm=False)
    io.post_process_online(ctx)
    (result,) = ctx.final_res_batch
    return result.outputs.data.numpy().astype(np.float32), len(prompts)


@pytest.mark.parametrize("use_activation", [None, True, False], ids=["default", "normalize", "raw"])
def test_chunked_long_text_gets_the_requests_normalisation(engine, long_input, chunk_means, use_activation):
    got, num_requests = serve_embedding(engine, long_input, use_activation)
    assert num_requests == 4
    expected = reference(chunk_means, use_activation)
    assert got.shape == expected.shape == (384,)
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)
