"""Patch 0041: on the CPU, ``LLM(...)`` with an encoder-only pooling model
gets twice the CPU's default step (``max_num_batched_tokens`` 8192,
``max_num_seqs`` 512, against 4096 and 256), what the base's
``performance_mode="throughput"`` gives, where the user set neither.

Measured (docs/performance.md, "Batch shapes"): all-MiniLM-L6-v2 over the
2,758 STS-B sentences, +7.7% sentences/s for +90 MiB of worker peak. The
server's defaults (2048 / 128, latency first), decoder pooling models and a
user's own values are left as they are."""

from __future__ import annotations

from scripts.validation.models import minilm_path


def scheduler(model, usage: str = "LLM_CLASS", **kwargs):
    """The engine config's ``SchedulerConfig`` for ``model`` made as
    ``usage`` (a ``UsageContext`` name) makes it."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    args = EngineArgs(model=str(model), runner="pooling", **kwargs)
    config = args.create_engine_config(usage_context=UsageContext[usage])
    return config.model_config, config.scheduler_config


def test_offline_encoder_only_pooling_gets_the_larger_step():
    model, sched = scheduler(minilm_path())
    assert model.attn_type == "encoder_only"
    assert (sched.max_num_batched_tokens, sched.max_num_seqs) == (8192, 512)


def test_the_server_keeps_its_defaults():
    _, sched = scheduler(minilm_path(), "OPENAI_API_SERVER")
    assert (sched.max_num_batched_tokens, sched.max_num_seqs) == (2048, 128)


def test_a_value_the_user_set_is_kept():
    _, sched = scheduler(minilm_path(), max_num_seqs=64)
    assert (sched.max_num_batched_tokens, sched.max_num_seqs) == (8192, 64)
    _, sched = scheduler(minilm_path(), max_num_batched_tokens=2048)
    assert (sched.max_num_batched_tokens, sched.max_num_seqs) == (2048, 512)


def test_throughput_mode_doubles_on_top():
    _, sched = scheduler(minilm_path(), performance_mode="throughput")
    assert (sched.max_num_batched_tokens, sched.max_num_seqs) == (16384, 1024)


def test_decoder_pooling_keeps_the_cpu_defaults(tiny_qwen3):
    model, sched = scheduler(tiny_qwen3)
    assert model.attn_type == "decoder"
    assert (sched.max_num_batched_tokens, sched.max_num_seqs) == (4096, 256)
