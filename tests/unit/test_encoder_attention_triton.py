"""The Triton kernel the encoder-only model state (patch 0002) feeds on a GPU,
run under Triton's interpreter.

On a GPU an encoder-only model's attention can run vLLM's Triton backend
(``TritonAttentionBackend`` supports ENCODER_ONLY: ``context_attention_fwd``,
non-causal, no KV cache), fed with the metadata ``EncoderOnlyModelState``
builds from the step's input batch: query start locations, sequence lengths,
the number of tokens, padded for full CUDA graphs. This module builds that
state for two ``EncoderOnlyAttention`` layers on the Triton backend (wrapped
by vLLM's ``create_encoder_only_attention_backend``, as the real layer does),
runs the layer's Triton attention with the metadata of a step, and compares
with PyTorch's scaled-dot-product attention over each prompt alone.

Like tests/unit/test_native_kernels.py: Triton runs here only under its
interpreter, which vLLM takes into account at import, so without
``TRITON_INTERPRET=1`` the one test defined runs this module in a fresh
process with it and checks that every case passed.
"""

from __future__ import annotations

import os

import pytest

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
CASES = 3  # the tests of the interpreted branch below


if not INTERPRETED:

    def test_encoder_attention_triton_under_the_interpreter(run_under_interpreter):
        # every case passed, none skipped or failed (the interpreter may warn
        # about the 0/0 of the padded requests' rows)
        assert run_under_interpreter(__file__) == {"passed": CASES}

else:
    import dataclasses

    import numpy as np
    import torch

    # The CPU worker's set-up (pinned memory, UVA buffers as host tensors).
    import vllm.v1.worker.cpu.shm  # noqa: F401
    from vllm.config.compilation import CUDAGraphMode
    from vllm.model_executor.layers.attention.encoder_only_attention import (
        create_encoder_only_attention_backend,
    )
    from vllm.v1.attention.backend import AttentionType
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend, TritonAttentionImpl
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    HEADS, HEAD_SIZE = 2, 32  # MiniLM's head size; 2 heads keep the interpreter quick
    LAYERS = ("encoder.layer.0.attention.attn", "encoder.layer.1.attention.attn")
    CPU = torch.device("cpu")

    @pytest.fixture(scope="module")
    def state_and_layers():
        """all-MiniLM-L6-v2's real config; two encoder-only layers on the
        Triton backend; the model state MRV2 picks for them."""
        from vllm.v1.worker.gpu.model_states import init_model_state
        from vllm.v1.worker.gpu.model_states.encoder_only import EncoderOnlyModelState

        from tests.unit.stand_ins import encoder_only_model, minilm_engine_config

        config = minilm_engine_config()
        model = encoder_only_model(
            config, create_encoder_only_attention_backend(TritonAttentionBackend), LAYERS, HEADS, HEAD_SIZE,
            impl=lambda: TritonAttentionImpl(HEADS, HEAD_SIZE, HEAD_SIZE**-0.5, HEADS, None, None, "auto",
                                             attn_type=AttentionType.ENCODER_ONLY))
        state = init_model_state(config, model, None, CPU)
        assert isinstance(state, EncoderOnlyModelState)
        return state, list(model.layers)

    def input_batch(lens: list[int], num_reqs_padded: int, num_tokens_padded: int) -> InputBatch:
        """A step of whole prompts of ``lens`` tokens (none computed before), in
        MRV2's input buffers as its ``prepare_inputs`` leaves them: query start
        locations padded with the token count, sequence lengths with zeros."""
        num_reqs, num_tokens = len(lens), sum(lens)
        buffers = InputBuffers(16, 128, CPU)
        batch = InputBatch.make_dummy(num_reqs, num_tokens, buffers)
        scheduled = np.asarray(lens, dtype=np.int32)
        qsl = np.full(num_reqs_padded + 1, num_tokens, dtype=np.int32)
        qsl[0] = 0
        np.cumsum(scheduled, out=qsl[1 : num_reqs + 1])
        buffers.query_start_loc[: num_reqs_padded + 1] = torch.from_numpy(qsl)
        buffers.seq_lens[:num_reqs] = torch.from_numpy(scheduled)
        upper = np.zeros(num_reqs_padded, dtype=np.int32)
        upper[:num_reqs] = scheduled
        return dataclasses.replace(
            batch, num_reqs_after_padding=num_reqs_padded, num_tokens_after_padding=num_tokens_padded,
            num_scheduled_tokens=scheduled, query_start_loc=buffers.query_start_loc[: num_reqs_padded + 1],
            query_start_loc_np=qsl, seq_lens=buffers.seq_lens[:num_reqs_padded],
            seq_lens_cpu_upper_bound=torch.from_numpy(upper), prefill_len_np=scheduled.copy(),
            is_prefilling_np=np.ones(num_reqs, dtype=np.bool_))

    def run_step(state, layers, lens, mode, num_reqs_padded, num_tokens_padded):
        """Each layer's Triton attention on random q/k/v with the metadata the
        state builds; returns (outputs, q/k/v) per layer. Output rows start as
        NaN: a row the kernel does not write stays NaN."""
        batch = input_batch(lens, num_reqs_padded, num_tokens_padded)
        no_groups = KVCacheConfig(num_blocks=0, kv_cache_tensors=[], kv_cache_groups=[])
        metadata = state.prepare_attn(batch, mode, (), torch.zeros(0, num_tokens_padded, dtype=torch.int64),
                                      [], no_groups)
        assert sorted(metadata) == sorted(LAYERS)
        gen = torch.Generator().manual_seed(sum(lens))
        results = []
        for layer in layers:
            q, k, v = (torch.randn(num_tokens_padded, HEADS, HEAD_SIZE, generator=gen) for _ in range(3))
            out = torch.full((num_tokens_padded, HEADS, HEAD_SIZE), float("nan"))
            layer.impl.forward(layer, q, k, v, torch.empty(0), metadata[layer.layer_name], out)
            results.append((out, q, k, v))
        return results

    def reference(q, k, v, lens):
        """Bidirectional attention over each prompt alone (PyTorch SDPA)."""
        outs, start = [], 0
        for n in lens:
            sl = slice(start, start + n)
            outs.append(torch.nn.functional.scaled_dot_product_attention(
                q[sl].transpose(0, 1), k[sl].transpose(0, 1), v[sl].transpose(0, 1),
                scale=HEAD_SIZE**-0.5).transpose(0, 1))
            start += n
        return torch.cat(outs)

    def test_the_kernel_runs_under_the_interpreter():
        from triton.runtime.interpreter import InterpretedFunction

        from vllm.v1.attention.ops import triton_prefill_attention

        assert isinstance(triton_prefill_attention._fwd_kernel, InterpretedFunction)

    def test_eager_step_attends_within_each_prompt(state_and_layers):
        lens = [5, 17, 9]
        for out, q, k, v in run_step(*state_and_layers, lens, CUDAGraphMode.NONE, 3, 31):
            torch.testing.assert_close(out, reference(q, k, v, lens), rtol=1e-5, atol=1e-5)

    def test_full_graph_padding_leaves_real_tokens_alone(state_and_layers):
        """FULL CUDA-graph mode: the metadata spans the padded requests (length
        0) and tokens; the real tokens' outputs are exact, the padding's are
        not written."""
        lens = [5, 17, 9]
        for out, q, k, v in run_step(*state_and_layers, lens, CUDAGraphMode.FULL, 4, 40):
            torch.testing.assert_close(out[:31], reference(q, k, v, lens), rtol=1e-5, atol=1e-5)
            assert torch.isnan(out[31:]).all()
