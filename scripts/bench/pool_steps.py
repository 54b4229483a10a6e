"""The pooling steps ``scripts.bench.pool_overhead`` times, built on the same
synthetic inputs (``make_step``): MRV2's (``mrv2_step``: ``CPUModelRunner.pool``
with a ``PoolingRunner``), the V1 runner's (``v1_step``: ``GPUModelRunner._pool``
on a real ``InputBatch``) and the pooler alone on prebuilt metadata
(``pooler_step``), each with vLLM's own pooler for the variant (``make_pooler``)
and the runner's unbound method called on a stand-in ``self``."""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np

HIDDEN = 384  # all-MiniLM-L6-v2's hidden size
COLBERT_DIM = 128
QUERY_TOKENS = 16
PROMPT_LENS = (8, 40)  # inclusive range of the synthetic prompt lengths, tokens
VOCAB = 30522


@contextmanager
def _stand_in_vllm_config():
    """``get_current_vllm_config()`` for pooler construction: whole prompts
    (no chunked prefill), no async scheduling (as the CPU platform sets it),
    fp32 head."""
    from vllm.config.vllm import set_current_vllm_config

    # async_scheduling: read by AllPool on 0.32.0 (clones its outputs when on), not on 0.26.0
    cfg = SimpleNamespace(scheduler_config=SimpleNamespace(enable_chunked_prefill=False, async_scheduling=False),
                          model_config=SimpleNamespace(head_dtype=None))
    with set_current_vllm_config(cfg):  # type: ignore[arg-type]
        yield


def make_pooler(variant: str):
    """vLLM's pooler for ``variant``: a ``DispatchPooler`` serving one task,
    and that task."""
    import torch

    from vllm.model_executor.layers.pooler.activations import PoolerNormalize
    from vllm.model_executor.layers.pooler.seqwise.heads import EmbeddingPoolerHead
    from vllm.model_executor.layers.pooler.seqwise.methods import get_seq_pooling_method
    from vllm.model_executor.layers.pooler.seqwise.poolers import SequencePooler
    from vllm.model_executor.layers.pooler.special import DispatchPooler
    from vllm.model_executor.layers.pooler.tokwise.heads import TokenEmbeddingPoolerHead
    from vllm.model_executor.layers.pooler.tokwise.methods import AllPool
    from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler

    if variant.startswith("embed-"):
        method = get_seq_pooling_method(variant.split("-")[1].upper())
        head = EmbeddingPoolerHead(head_dtype=torch.float32, activation=PoolerNormalize())
        return DispatchPooler({"embed": SequencePooler(pooling=method, head=head)}), "embed"
    projector = None
    if variant.startswith("li-"):
        torch.manual_seed(0)
        projector = torch.nn.Linear(HIDDEN, COLBERT_DIM, bias=False)
    with _stand_in_vllm_config():
        pooling = AllPool()
    head = TokenEmbeddingPoolerHead(head_dtype=torch.float32, projector=projector,
                                    activation=PoolerNormalize())
    return DispatchPooler({"token_embed": TokenPooler(pooling=pooling, head=head)}), "token_embed"


def _params(variant: str, task: str, i: int):
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.late_interaction import (build_late_interaction_doc_params,
                                               build_late_interaction_query_params)

    if variant == "li-query":
        return PoolingParams(task=task, late_interaction_params=build_late_interaction_query_params(f"q{i}", 1))
    if variant == "li-doc":
        return PoolingParams(task=task, late_interaction_params=build_late_interaction_doc_params("q"))
    return PoolingParams(task=task)


def _model(pooler):
    from scripts.validation.stand_ins import StandInPoolingModel

    return StandInPoolingModel(pooler=pooler)


def _seed_query(li_runner) -> None:
    """Cache one ColBERT query "q" for ``li-doc`` with uses that never run out."""
    import torch

    gen = torch.Generator().manual_seed(1)
    q = torch.nn.functional.normalize(torch.randn(QUERY_TOKENS, COLBERT_DIM, generator=gen), dim=-1)
    li_runner._query_cache["q"] = q
    li_runner._query_uses["q"] = 10**12


def make_step(variant: str, n: int, max_reqs: int, seed: int = 0) -> dict:
    """Inputs of one step of ``n`` requests, shared by both runners: prompt
    lengths, token ids, ``PoolingParams`` per runner (a pooler's updates
    mutate them), hidden states [num_tokens, 384] fp32."""
    import torch

    rng = np.random.default_rng(seed + n)
    lens = rng.integers(PROMPT_LENS[0], PROMPT_LENS[1] + 1, size=n).astype(np.int32)
    gen = torch.Generator().manual_seed(seed + n)
    return {"variant": variant, "n": n, "max_reqs": max_reqs, "lens": lens,
            "token_ids": [rng.integers(1000, VOCAB, size=int(k)).tolist() for k in lens],
            "hidden": torch.randn(int(lens.sum()), HIDDEN, generator=gen)}


def mrv2_step(step: dict):
    """A callable running one MRV2 pooling step on ``step``; returns the
    ``ModelRunnerOutput`` (pooler outputs on the host)."""
    import torch

    # MRV2's CPU runner (GPUModelRunner with the CPU's output hand-off): what runs here.
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner
    from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

    pooler, task = make_pooler(step["variant"])
    n, lens, max_reqs = step["n"], step["lens"], step["max_reqs"]
    model_config = SimpleNamespace(attn_type="encoder_only", pooler_config=SimpleNamespace(task=task),
                                   get_vocab_size=lambda: VOCAB, get_pooling_task=lambda tasks: task)
    vllm_config = SimpleNamespace(model_config=model_config,
                                  scheduler_config=SimpleNamespace(max_num_seqs=max_reqs))
    runner = PoolingRunner(_model(pooler), vllm_config)  # type: ignore[arg-type]
    # slots as MRV2's RequestState hands them out (free_indices.pop())
    slots = np.arange(max_reqs - 1, max_reqs - 1 - n, -1, dtype=np.int32)
    prompt_len = np.zeros(max_reqs, dtype=np.int32)
    req_ids = [f"req-{i}" for i in range(n)]
    for i, slot in enumerate(slots):
        runner.add_request(req_ids[i], int(slot), _params(step["variant"], task, i), step["token_ids"][i])
        prompt_len[slot] = lens[i]
    if step["variant"] == "li-doc":
        _seed_query(runner.late_interaction_runner)
    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    input_batch = SimpleNamespace(
        req_ids=req_ids, num_reqs=n, idx_mapping_np=slots, idx_mapping=torch.from_numpy(slots),
        num_scheduled_tokens=lens.copy(), num_tokens=int(qsl[-1]),
        query_start_loc=torch.from_numpy(qsl), query_start_loc_np=qsl,
        seq_lens_cpu_upper_bound=torch.from_numpy(lens.copy()))
    req_states = SimpleNamespace(prompt_len=SimpleNamespace(np=prompt_len))
    fake = SimpleNamespace(
        execute_model_state=None, is_last_pp_rank=True, pooling_runner=runner, req_states=req_states,
        kv_connector=SimpleNamespace(post_forward=lambda finished: None),
        main_stream=torch.cuda.current_stream(), output_copy_stream=torch.cuda.Stream(),
        postprocess_num_computed_tokens=lambda batch: None,  # device-side, not pooling
        eplb=SimpleNamespace(step=lambda **kwargs: None))
    # the CPU runner's hand-off: a class attribute of the runner (0009)
    fake.async_pooling_output_cls = CPUModelRunner.async_pooling_output_cls
    hidden = step["hidden"]

    def run():
        fake.execute_model_state = SimpleNamespace(input_batch=input_batch, hidden_states=hidden,
                                                   finished_req_ids=set(), ec_connector_output=None)
        output = CPUModelRunner.pool(fake)
        return output.get_output() if hasattr(output, "get_output") else output

    return run


def v1_step(step: dict):
    """A callable running one V1 pooling step (``GPUModelRunner._pool``) on
    ``step``; returns the ``ModelRunnerOutput``."""
    import torch

    from vllm.v1.pool.late_interaction_runner import LateInteractionRunner
    from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.utils import CpuGpuBuffer

    pooler, task = make_pooler(step["variant"])
    n, lens, max_reqs = step["n"], step["lens"], step["max_reqs"]
    batch_kwargs = dict(max_num_reqs=max_reqs, max_model_len=512, max_num_batched_tokens=max_reqs * 512,
                        device=torch.device("cpu"), vocab_size=VOCAB, block_sizes=[16],
                        max_num_blocks_per_req=[32], is_pooling_model=True)
    # the attention kernels' block sizes: a parameter of InputBatch on 0.26.0, gone on 0.32.0
    if "kernel_block_sizes" in inspect.signature(InputBatch).parameters:
        batch_kwargs["kernel_block_sizes"] = [16]
    input_batch = InputBatch(**batch_kwargs)
    li = LateInteractionRunner()
    for i in range(n):
        params = _params(step["variant"], task, i)
        pooler.get_pooling_updates(task).apply(params)  # as V1's _update_states
        req_id = f"req-{i}"
        input_batch.add_request(CachedRequestState(
            req_id=req_id, prompt_token_ids=step["token_ids"][i], mm_features=[], sampling_params=None,
            generator=None, block_ids=([],), num_computed_tokens=0, output_token_ids=[],
            pooling_params=params))
        li.register_request(req_id, params)
    input_batch.refresh_metadata()
    if step["variant"] == "li-doc":
        _seed_query(li)
    seq_lens = torch.zeros(max_reqs, dtype=torch.int32)
    seq_lens[:n] = torch.from_numpy(lens)
    qsl = CpuGpuBuffer(max_reqs + 1, dtype=torch.int32, device=torch.device("cpu"), pin_memory=False)
    qsl.np[: n + 1] = np.concatenate([[0], np.cumsum(lens)])
    qsl.copy_to_gpu(n + 1)
    fake = SimpleNamespace(input_batch=input_batch, optimistic_seq_lens_cpu=seq_lens, query_start_loc=qsl,
                           model=_model(pooler), late_interaction_runner=li,
                           _sync_device=lambda: None)  # the CPU runner's is a no-op too
    hidden, num_tokens, scheduled = step["hidden"], int(lens.sum()), lens.copy()

    def run():
        with torch.inference_mode():  # as V1's execute_model
            return GPUModelRunner._pool(fake, hidden, num_tokens, scheduled, None)

    return run


def pooler_step(step: dict):
    """A callable running only the pooler on prebuilt metadata (the tensor
    work both runners share)."""
    import torch

    from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

    pooler, task = make_pooler(step["variant"])
    n, lens = step["n"], step["lens"]
    params = [_params(step["variant"], task, i) for i in range(n)]
    for p in params:
        pooler.get_pooling_updates(task).apply(p)
    meta = PoolingMetadata(prompt_lens=torch.from_numpy(lens.copy()), prompt_token_ids=None,
                           prompt_token_ids_cpu=None, pooling_params=params,
                           pooling_states=[PoolingStates() for _ in range(n)])
    meta.build_pooling_cursor(lens.copy(), torch.from_numpy(lens.copy()), device=torch.device("cpu"))
    hidden = step["hidden"]

    def run():
        with torch.inference_mode():
            return pooler(hidden_states=hidden, pooling_metadata=meta)

    return run
