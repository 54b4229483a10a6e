"""A batch that mixes pooling requests with a LoRA adapter and requests
without one, on the CPU (issue 28 item 5): each request is embedded with
what it asked for. On the base the requests without a LoRA got the adapter
too (the CPU LoRA ops gathered slot -1, "no LoRA", as the last slot: the
adapter's, with the default ``max_loras=1``), on both runners.

A tiny random Qwen3 decoder (embed: last token, normalised) and a random
LoRA adapter written in PEFT's format (``adapter_config.json``,
``adapter_model.safetensors``: ``lora_A`` [r, in], ``lora_B`` [out, r],
scale ``lora_alpha / r``) on every attention and MLP projection. Reference:
transformers on the base weights, and on the weights with the adapter merged
(``W + lora_alpha / r * B @ A``, PEFT's definition of a LoRA layer). The
engine runs in the test's process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scripts.validation.engine import hf_last_token_embed, vllm_runner
from scripts.validation.checkpoints.zoo import make_tiny_qwen3

TOL = 1e-4
RANK, ALPHA = 8, 16
TARGETS = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}
PROMPTS = [[1000 + 7 * i + j for j in range(n)] for i, n in enumerate((5, 9, 12, 7, 16, 3))]
WITH_LORA = [True, False, True, False, False, True]


def write_random_lora(base_dir: Path, adapter_dir: Path, merged_dir: Path, seed: int = 0) -> None:
    """A random LoRA for the checkpoint at ``base_dir``: the adapter in PEFT's
    file format at ``adapter_dir``, and the checkpoint with it merged at
    ``merged_dir`` (the transformers reference with the adapter)."""
    import torch
    import transformers
    from safetensors.torch import save_file

    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            for block, names in TARGETS.items():
                for name in names:
                    linear = getattr(getattr(layer, block), name)
                    a = 0.1 * torch.randn(RANK, linear.in_features, generator=g)
                    b = 0.1 * torch.randn(linear.out_features, RANK, generator=g)
                    prefix = f"base_model.model.model.layers.{i}.{block}.{name}"
                    tensors[f"{prefix}.lora_A.weight"] = a.contiguous()
                    tensors[f"{prefix}.lora_B.weight"] = b.contiguous()
                    linear.weight += (ALPHA / RANK) * b @ a
    adapter_dir.mkdir(parents=True)
    save_file(tensors, str(adapter_dir / "adapter_model.safetensors"))
    (adapter_dir / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "FEATURE_EXTRACTION", "base_model_name_or_path": str(base_dir),
        "r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0, "bias": "none",
        "target_modules": sorted(n for names in TARGETS.values() for n in names),
        "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "modules_to_save": None}))
    model.save_pretrained(merged_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (base_dir / name).exists():
            (merged_dir / name).write_bytes((base_dir / name).read_bytes())


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    """(base checkpoint, adapter, references: base and with the adapter)."""
    root = tmp_path_factory.mktemp("lora")
    base = make_tiny_qwen3(root / "qwen3")
    write_random_lora(base, root / "adapter", root / "merged")
    return base, root / "adapter", hf_last_token_embed(base, PROMPTS), hf_last_token_embed(root / "merged", PROMPTS)


@pytest.mark.parametrize("runner", ["default", "v1"])
def test_mixed_lora_batch_gives_each_request_what_it_asked_for(in_process, lora_model, runner):
    from vllm.lora.request import LoRARequest

    base, adapter, ref_base, ref_lora = lora_model
    assert np.abs(ref_lora - ref_base).max() > 0.1  # the adapter changes every embedding
    lora = LoRARequest("random", 1, str(adapter))
    requests = [lora if w else None for w in WITH_LORA]
    # with max_loras=1 (the default) the adapter sits in the last slot; the tiny
    # model's KV cache needs little of the machine's memory (64 MiB: 65,536 tokens)
    with vllm_runner(base, runner, enable_lora=True, max_lora_rank=RANK, max_loras=1,
                     gpu_memory_utilization=0.05, kv_cache_memory_bytes=64 << 20) as llm:
        outs = llm.embed([{"prompt_token_ids": p} for p in PROMPTS], lora_request=requests, use_tqdm=False)
    got = np.stack([o.outputs.embedding for o in outs]).astype(np.float32)
    want = np.where(np.asarray(WITH_LORA)[:, None], ref_lora, ref_base)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
