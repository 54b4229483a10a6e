"""Runner selection by pooling task (patch 0011): a pooling model whose
configured task, or whose only tasks, MRV2 does not serve (token-level tasks
on a decoder, PR 50574's contract) keeps V1 by default, with upstream's
warning for a feature MRV2 does not support naming the task; forcing MRV2 on
it is a start-up error naming the task and VLLM_USE_V2_MODEL_RUNNER=0. Before
the patch these models were sent to MRV2 and failed at start-up ("Model
Runner V2 serves none of this model's pooling tasks"). Real configs
(``EngineArgs.create_engine_config``) of small local checkpoints; configs
only, no weights are loaded."""

from __future__ import annotations

import pytest

from scripts.validation.models import copy_tokenizer


def _checkpoint(root, name: str, architecture: str, config_cls: str = "Qwen2Config", **extra) -> str:
    """A config-only checkpoint (``config_cls``, Qwen2 by default) declaring
    ``architecture``, with MiniLM's tokenizer: enough for
    ``create_engine_config``."""
    import transformers

    dest = root / name
    dest.mkdir()
    config = getattr(transformers, config_cls)(
        vocab_size=30522, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, **extra)
    config.architectures = [architecture]
    config.save_pretrained(dest)
    copy_tokenizer(dest)
    return str(dest)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("selection-by-task")
    return {
        "reward": _checkpoint(root, "reward", "Qwen2ForRewardModel"),
        "process_reward": _checkpoint(root, "prm", "Qwen2ForProcessRewardModel"),
        "embedder": _checkpoint(root, "embedder", "Qwen2Model"),
        # jinaai/jina-reranker-v3: a Qwen3 decoder whose pooler offers token_embed
        # only (late interaction, SupportsLateInteraction)
        "late_interaction": _checkpoint(root, "jina-ranking", "JinaForRanking", "Qwen3Config", head_dim=64),
    }


@pytest.mark.parametrize(("name", "task"), [("reward", "token_classify"),
                                            ("process_reward", "token_classify"),
                                            ("late_interaction", "token_embed")])
def test_token_level_only_architectures_keep_v1_by_default(real_config, checkpoints,
                                                           vllm_config_log, name, task):
    config = real_config(checkpoints[name], "pooling")
    assert config.model_config.attn_type == "decoder"
    assert config.use_v2_model_runner is False
    (line,) = [m for m in vllm_config_log if "Model Runner V2 does not yet support" in m]
    assert f"only pooling tasks are ['{task}']" in line and "V1 model runner" in line


@pytest.mark.parametrize(("name", "task"), [("reward", "token_classify"),
                                            ("process_reward", "token_classify"),
                                            ("late_interaction", "token_embed")])
def test_forcing_mrv2_on_token_level_only_architecture_fails_at_startup(real_config, checkpoints, name, task):
    with pytest.raises(ValueError) as e:
        real_config(checkpoints[name], "pooling", env="1")
    message = str(e.value)
    assert "Model Runner V2 does not yet support" in message and f"['{task}']" in message
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in message


@pytest.mark.parametrize("task", ["token_embed", "token_classify"])
def test_decoder_configured_for_a_token_task_keeps_v1(real_config, tiny_qwen3, vllm_config_log, task):
    config = real_config(tiny_qwen3, "pooling", pooler_config={"task": task})
    assert config.use_v2_model_runner is False
    (line,) = [m for m in vllm_config_log if "Model Runner V2 does not yet support" in m]
    assert f"the configured pooling task '{task}'" in line
    with pytest.raises(ValueError, match=f"'{task}'.*VLLM_USE_V2_MODEL_RUNNER=0"):
        real_config(tiny_qwen3, "pooling", env="1", pooler_config={"task": task})


def test_models_whose_tasks_mrv2_serves_still_default_to_mrv2(real_config, minilm, tiny_qwen3, checkpoints):
    """Unchanged by the patch: decoders asked for embed (their default task),
    encoder-only models asked for a token task."""
    assert real_config(tiny_qwen3, "pooling").use_v2_model_runner is True
    assert real_config(checkpoints["embedder"], "pooling").use_v2_model_runner is True
    assert real_config(tiny_qwen3, "pooling", pooler_config={"task": "embed"}).use_v2_model_runner is True
    assert real_config(minilm, "pooling", pooler_config={"task": "token_embed"}).use_v2_model_runner is True


def test_encoder_only_model_with_chunked_prefill_and_prefix_caching_flags_selects_mrv2(real_config, minilm):
    """The flags set explicitly do not keep an encoder-only model off MRV2:
    the engine turns chunked prefill off for a model without KV-cache groups,
    and prefix caching has nothing to cache (patch 0002)."""
    config = real_config(minilm, "pooling", enable_chunked_prefill=True, enable_prefix_caching=True)
    assert config.use_v2_model_runner is True
    assert real_config(minilm, "pooling", env="1", enable_chunked_prefill=True).use_v2_model_runner is True


def test_selecting_the_runner_imports_no_mrv2_worker_module(checkpoints, minilm):
    """The selection by pooling task reads the rule both sides share
    (``vllm.tasks.model_runner_v2_pooling_tasks``) and what the model config
    declares: building the engine config and asking for the runner, for a
    model kept on V1 and one sent to MRV2, imports none of MRV2's worker
    modules (``vllm.v1.worker.gpu``), whose ``PoolingRunner`` applies the
    same rule. A fresh interpreter, so that nothing else imported them first."""
    import json
    import os
    import subprocess
    import sys

    from scripts.series.base import REPO

    code = (
        "import json, sys\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "runners = [EngineArgs(model=m, runner='pooling', **kw).create_engine_config().use_v2_model_runner\n"
        "           for m, kw in ((sys.argv[1], {}), (sys.argv[2], {'pooler_config': {'task': 'token_embed'}}))]\n"
        "print(json.dumps({'runners': runners,\n"
        "                  'worker': sorted(m for m in sys.modules if m.startswith('vllm.v1.worker.gpu'))}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    proc = subprocess.run([sys.executable, "-c", code, checkpoints["reward"], minilm],
                          capture_output=True, text=True, env=env, cwd=str(REPO), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"runners": [False, True], "worker": []}
