"""The validation matrix's real-weight rows (all-MiniLM-L6-v2 against
sentence-transformers and transformers) and MTEB STS rows (STS-B test through
``mteb``: sentence-transformers against the engine through mteb's
``VllmEncoderWrapper``). ``REAL`` holds each check's measure, run by
``scripts.validation.matrix.runner.run_row`` on each runner of ``RUNNER_CHOICE``
that the base has (``base_runners``: no V1 rows from 0.34.0)."""

from __future__ import annotations

import functools
import os

from scripts.common.environ import environ
from scripts.validation.checkpoints.models import minilm_path, sts_test
from scripts.validation.engine import (GPU_MEMORY_UTILIZATION, RUNNER_CHOICE, RUNNER_ENV, assert_runner,
                                       base_runners, close_llm, embed, engine_env, forward, l2_normalize,
                                       rowwise_cosine, runner_in_use, st_embed, vllm_runner)
from scripts.validation.matrix.tasks import max_abs_error


def minilm_embed(runner: str) -> tuple[float, str]:
    """min cosine of the engine's embeddings of STS-B test with sentence-transformers'
    (``runner``: ``"MRV2"`` or ``"V1"``, asserted), and the runner the worker built
    (``runner_in_use``)."""
    sentences = sts_test().sentences
    with vllm_runner(minilm_path(), RUNNER_CHOICE[runner], want=runner) as llm:
        got, ran = embed(llm, sentences)[0], runner_in_use(llm)
    return float(rowwise_cosine(got, st_embed(minilm_path(), sentences)).min()), ran


def minilm_token_embed(runner: str) -> tuple[float, str]:
    """max abs error of the engine's token embeddings of 128 STS-B sentences
    against transformers' last hidden states, normalised per token, and the
    runner the worker built."""
    sentences = sts_test().sentences[:128]
    with vllm_runner(minilm_path(), RUNNER_CHOICE[runner], want=runner,
                     pooler_config={"task": "token_embed"}) as llm:
        got = [o.outputs.data.float().numpy()
               for o in llm.encode(sentences, pooling_task="token_embed", use_tqdm=False)]
        ran = runner_in_use(llm)
    return max_abs_error(got, [l2_normalize(h) for h in forward(minilm_path(), sentences)]), ran


def mteb_sts(runner: str) -> tuple[float, str]:
    """|main score (cosine Spearman) of the engine - that of sentence-transformers|
    on STS-B test, both through ``mteb.evaluate``, and the runner the worker
    built. The engine is the one mteb's ``VllmEncoderWrapper`` opens (asserted to
    run ``runner``)."""
    import mteb
    from mteb.models.vllm_wrapper import VllmEncoderWrapper

    reference = mteb_sts_reference()
    engine_env()
    with environ(VLLM_USE_V2_MODEL_RUNNER=RUNNER_ENV[RUNNER_CHOICE[runner]]):
        # the wrapper switches vLLM's workers to spawn for the whole process: only for itself
        with environ(VLLM_WORKER_MULTIPROC_METHOD=os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")):
            wrapper = VllmEncoderWrapper(str(minilm_path()), dtype="float32",
                                         gpu_memory_utilization=GPU_MEMORY_UTILIZATION, enforce_eager=True,
                                         trust_remote_code=False)
        try:
            assert_runner(wrapper.llm, runner)
            ran = runner_in_use(wrapper.llm)
            score = mteb.evaluate(wrapper, local_sts_task(), cache=None,
                                  show_progress_bar=False).task_results[0].get_score()
        finally:
            close_llm(wrapper.llm)
    return abs(score - reference), ran


@functools.cache
def mteb_sts_reference() -> float:
    """sentence-transformers' main score on the local STSBenchmark task (once a process)."""
    import mteb
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path()), device="cpu")
    return mteb.evaluate(model, local_sts_task(), cache=None,
                         show_progress_bar=False).task_results[0].get_score()


def local_sts_task():
    """mteb's STSBenchmark task, its test split read from ``../shared/data``
    instead of the hub."""
    from datasets import Dataset
    from mteb.tasks.sts.eng.sts_benchmark_sts import STSBenchmarkSTS

    class LocalSTSBenchmark(STSBenchmarkSTS):
        def load_data(self, num_proc=None, *, timer=None, **kwargs):
            if self.data_loaded:
                return
            pairs = sts_test()
            self.dataset = {"default": {"test": Dataset.from_dict(
                {"sentence1": pairs.first, "sentence2": pairs.second, "score": pairs.gold})}}
            self.data_loaded = True

    return LocalSTSBenchmark()


# id: (task, metric, tolerance, reference, measure)
REAL = {
    "minilm-embed": ("embed", "min cosine", 0.99999, "sentence-transformers", minilm_embed),
    "minilm-token-embed": ("token_embed", "max abs error", 1e-4,
                           "transformers last_hidden_state per token, normalised", minilm_token_embed),
    "mteb-sts": ("MTEB STS (STSBenchmark test)", "abs delta", 1e-4, "sentence-transformers under mteb",
                 mteb_sts),
}
ROW_IDS = [f"{k}/{r}" for k in REAL for r in RUNNER_CHOICE if r in base_runners()]
