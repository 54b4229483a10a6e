"""Patch 0040: the CUDA-graph mode of an encoder-only model on MRV2 is the one
the V1 runner uses for it.

The V1 runner puts the encoder-only layers in a KV-cache group of their own
(``may_add_encoder_only_layers_to_kv_cache_config``), so their attention
backend's ``get_cudagraph_support`` counts when it resolves the CUDA-graph
mode (``_check_and_update_cudagraph_mode``). MRV2 gives such a model zero
KV-cache groups; its ``EncoderOnlyModelState`` builds the encoder-only
attention groups itself, and reports their support with
``get_additional_cg_support()``, by which the runner narrows its own
(``AttentionCGSupportInfo.narrow`` in ``initialize_kv_cache``).

Both runners' own code runs here, without a GPU: MRV2's
``GPUModelRunner.initialize_kv_cache`` up to the CUDA-graph manager it builds
(whose mode is recorded), V1's encoder-only KV-cache group and
``initialize_attn_backend`` up to the CUDA-graph dispatcher it initialises.
The model is all-MiniLM-L6-v2's real config with two ``EncoderOnlyAttention``
layers whose backend is a stand-in reporting one ``AttentionCGSupport``
level, wrapped by vLLM's own ``create_encoder_only_attention_backend`` as the
real layer wraps its backend.

The requested mode is set on the compilation config as a GPU engine's would
be (``VLLM_COMPILE``, attention among the splitting ops). Note: VllmConfig
turns a requested full mode into PIECEWISE for every pooling model on a
platform with static graphs (config/vllm.py, "Pooling models do not support
full cudagraphs"), so with today's configs an encoder-only model reaches the
runner with PIECEWISE or NONE; the other rows cover what the runner does when
it is handed a full mode all the same.
"""

from __future__ import annotations

import itertools

import pytest
import torch

# The CPU worker's set-up (pinned memory and UVA buffers as plain host tensors).
import vllm.v1.worker.cpu.shm  # noqa: F401
from vllm.config.compilation import CompilationMode, CUDAGraphMode
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import AttentionCGSupportInfo

from tests.unit.stand_ins import encoder_only_model, forget_layers, minilm_engine_config, stand_in_backend

# The base's MRV2 runner internals (0040): a test of the 0.26.0 line; upstream carries the
# behaviour from 0.27.0 (0040 dropped there), with its own internals.
pytestmark = pytest.mark.line("0.26.0")

S = AttentionCGSupport
M = CUDAGraphMode

# (requested mode, encoder backend's support) -> the mode V1 resolves, or
# ValueError. VLLM_COMPILE with attention among the splitting ops, one token
# per decode step (no speculative decoding).
EXPECTED = {
    M.NONE: {s: M.NONE for s in S},
    M.PIECEWISE: {s: M.PIECEWISE for s in S},
    M.FULL_AND_PIECEWISE: {S.ALWAYS: M.FULL_AND_PIECEWISE, S.UNIFORM_BATCH: M.FULL_AND_PIECEWISE,
                           S.UNIFORM_SINGLE_TOKEN_DECODE: M.FULL_AND_PIECEWISE, S.NEVER: M.PIECEWISE},
    M.FULL: {S.ALWAYS: M.FULL, S.UNIFORM_BATCH: M.FULL_AND_PIECEWISE,
             S.UNIFORM_SINGLE_TOKEN_DECODE: M.FULL_AND_PIECEWISE, S.NEVER: ValueError},
    M.FULL_DECODE_ONLY: {S.ALWAYS: M.FULL_DECODE_ONLY, S.UNIFORM_BATCH: M.FULL_DECODE_ONLY,
                         S.UNIFORM_SINGLE_TOKEN_DECODE: M.FULL_DECODE_ONLY, S.NEVER: M.PIECEWISE},
}
CASES = list(itertools.product(EXPECTED, S))
LAYERS = ("encoder.layer.0.attention.attn", "encoder.layer.1.attention.attn")


@pytest.fixture(scope="module")
def minilm_config():
    return minilm_engine_config()


@pytest.fixture
def encoder_model(minilm_config):
    """``encoder_model(support)``: two encoder-only layers with MiniLM's head
    shape whose backend reports ``support``; they leave the config afterwards."""
    yield lambda support: encoder_only_model(minilm_config, stand_in_backend(support), LAYERS)
    forget_layers(minilm_config, LAYERS)


def request_mode(config, mode: CUDAGraphMode) -> None:
    """What a GPU engine's compilation config holds when the runner resolves
    its mode: VLLM_COMPILE, attention among the splitting ops, ``mode``."""
    cc = config.compilation_config
    cc.mode = CompilationMode.VLLM_COMPILE
    cc.splitting_ops = list(cc._attention_ops)
    cc.cudagraph_mode = mode
    assert cc.splitting_ops_contain_attention()


class Stop(Exception):
    """Raised by the recorders once the runner has decided its mode."""


def mrv2_mode(config, model, monkeypatch) -> CUDAGraphMode:
    """The mode MRV2's ``initialize_kv_cache`` gives its CUDA-graph manager for
    ``model`` with the KV-cache config an encoder-only model gets (no group)."""
    import vllm.v1.worker.gpu.model_runner as mrv2
    from vllm.v1.worker.gpu.model_states import init_model_state
    from vllm.v1.worker.gpu.model_states.encoder_only import EncoderOnlyModelState

    seen = []

    def graph_manager(vllm_config, device, cudagraph_mode, **kwargs):
        seen.append(cudagraph_mode)
        raise Stop

    monkeypatch.setattr(mrv2, "ModelCudaGraphManager", graph_manager)
    runner = object.__new__(mrv2.GPUModelRunner)
    runner.__dict__.update(
        vllm_config=config, compilation_config=config.compilation_config,
        parallel_config=config.parallel_config, cache_config=config.cache_config,
        device=torch.device("cpu"), max_model_len=config.model_config.max_model_len,
        max_num_reqs=config.scheduler_config.max_num_seqs,
        max_num_tokens=config.scheduler_config.max_num_batched_tokens,
        is_encoder_decoder=False, dcp_size=1, dcp_rank=0, cp_interleave=1,
        supports_mm_inputs=False, req_states=None, decode_query_len=1, speculator=None,
        lora_capture_cases=None,
        model_state=init_model_state(config, model, None, torch.device("cpu")),
    )
    assert isinstance(runner.model_state, EncoderOnlyModelState)
    with pytest.raises(Stop):
        runner.initialize_kv_cache(KVCacheConfig(num_blocks=0, kv_cache_tensors=[], kv_cache_groups=[]))
    assert runner.block_tables.num_kv_cache_groups == 0
    return seen[0]


def v1_mode(config) -> CUDAGraphMode:
    """The mode the V1 runner's ``initialize_attn_backend`` hands its
    CUDA-graph dispatcher after adding the encoder-only KV-cache group."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1Runner

    seen = []

    class Dispatcher:
        def initialize_cudagraph_keys(self, cudagraph_mode, uniform_decode_query_len):
            seen.append(cudagraph_mode)
            raise Stop

    runner = object.__new__(V1Runner)
    runner.__dict__.update(
        vllm_config=config, compilation_config=config.compilation_config,
        parallel_config=config.parallel_config, speculative_config=None,
        kv_cache_config=KVCacheConfig(num_blocks=0, kv_cache_tensors=[], kv_cache_groups=[]),
        kv_cache_dtype=config.model_config.dtype, runner_only_attn_layers=set(), attn_groups=[],
        kv_sharing_fast_prefill_eligible_layers=set(), uniform_decode_query_len=1,
        max_num_reqs=config.scheduler_config.max_num_seqs, cudagraph_dispatcher=Dispatcher(),
    )
    runner.may_add_encoder_only_layers_to_kv_cache_config()
    assert [g.layer_names for g in runner.kv_cache_config.kv_cache_groups] == [list(LAYERS)]
    with pytest.raises(Stop):
        runner.initialize_attn_backend(runner.kv_cache_config)
    return seen[0]


def resolve(side, config, requested):
    """``side()``'s mode, or the ValueError it raises, as (kind, text)."""
    request_mode(config, requested)
    try:
        return side()
    except ValueError as e:
        return ValueError, str(e)


@pytest.mark.parametrize(("requested", "support"), CASES, ids=[f"{r.name}-{s.name}" for r, s in CASES])
def test_mrv2_resolves_the_mode_v1_resolves(requested, support, minilm_config, encoder_model, monkeypatch):
    model = encoder_model(support)
    v1 = resolve(lambda: v1_mode(minilm_config), minilm_config, requested)
    mrv2 = resolve(lambda: mrv2_mode(minilm_config, model, monkeypatch), minilm_config, requested)
    expected = EXPECTED[requested][support]
    if expected is ValueError:
        assert v1[0] is ValueError and mrv2[0] is ValueError
        # the same refusal, naming the encoder-only backend
        assert mrv2[1] == v1[1]
        assert f"EncoderOnlyAttention_StandIn{support.name}" in mrv2[1]
    else:
        assert v1 == expected
        assert mrv2 == expected


def test_the_encoder_only_state_reports_its_backends_support(minilm_config, encoder_model):
    from vllm.v1.worker.gpu.model_states import init_model_state

    model = encoder_model(S.UNIFORM_SINGLE_TOKEN_DECODE)
    state = init_model_state(minilm_config, model, None, torch.device("cpu"))
    assert state.get_additional_cg_support() == (
        S.UNIFORM_SINGLE_TOKEN_DECODE, "EncoderOnlyAttention_StandInUNIFORM_SINGLE_TOKEN_DECODE")


def test_a_state_without_attention_groups_of_its_own_adds_no_constraint(minilm_config, encoder_model):
    from vllm.v1.worker.gpu.model_states.default import DefaultModelState

    state = DefaultModelState(minilm_config, encoder_model(S.NEVER), None, torch.device("cpu"))
    assert state.get_additional_cg_support() == (S.ALWAYS, None)


@pytest.mark.parametrize(("first", "second", "expected"), [
    ((S.ALWAYS, None), (S.UNIFORM_BATCH, "B"), (S.UNIFORM_BATCH, "B")),
    ((S.UNIFORM_BATCH, "A"), (S.NEVER, "B"), (S.NEVER, "B")),
    ((S.UNIFORM_BATCH, "A"), (S.ALWAYS, "B"), (S.UNIFORM_BATCH, "A")),
    ((S.UNIFORM_BATCH, "A"), (S.UNIFORM_BATCH, "B"), (S.UNIFORM_BATCH, "A")),  # a tie keeps A
    ((S.ALWAYS, None), (S.ALWAYS, None), (S.ALWAYS, None)),
])
def test_narrow_keeps_the_lower_support_and_its_backend(first, second, expected):
    narrowed = AttentionCGSupportInfo(*first).narrow(*second)
    assert (narrowed.min_cg_support, narrowed.min_cg_attn_backend) == expected
