"""Issue 28 item 2 (patch 0045): the settings sentence-transformers >= 5.4
writes (6.2 here) are read, and the older spellings still are.

Checkpoints saved by sentence-transformers itself at test time
(``scripts.validation.checkpoints.st_saved``), read through the engine's own config
(``EngineArgs.create_engine_config``, no weights loaded). What each setting
must become is what sentence-transformers does with it: the pooling mode
(``1_Pooling/config.json``, ``"pooling_mode"`` since 5.4, the
``pooling_mode_*`` flags before), the Normalize and Dense modules
(``modules.json`` types ``sentence_transformers.base.modules.*`` and
``sentence_transformers.sentence_transformer.modules.*`` since 5.4,
``sentence_transformers.models.*`` before), the maximum length (the
tokenizer's ``model_max_length`` since 5.4, ``max_seq_length`` in
``sentence_bert_config.json`` before), a cross-encoder's activation
(``config_sentence_transformers.json`` since 6.0). Every single pooling mode
has a vLLM sequence pooling type (``max``, ``mean_sqrt_len_tokens`` and
``weightedmean`` too; the methods themselves against sentence-transformers'
``Pooling`` in ``tests/unit/test_seq_pooling_methods.py``); several modes
concatenated are refused at start-up with a message naming them, instead of
being served as another pooling. A Pooling module that excludes the prompt's
tokens (``include_prompt: false``) of a model with prompts is refused at
start-up: vLLM pools every token of the input. The values the engine computes from these
settings are compared with ``SentenceTransformer.encode`` /
``CrossEncoder.predict`` in ``tests/e2e/test_fault_st_settings.py``."""

from __future__ import annotations

import pytest

from scripts.validation.checkpoints import st_saved


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> a directory saved by sentence-transformers (or by hand in the
    older layout), made on first use."""
    root = tmp_path_factory.mktemp("st-saved")
    makers = {
        "mean_normalize": lambda p: st_saved.save_st(p, "mean", max_seq_length=128),
        "cls_dense": lambda p: st_saved.save_st(p, "cls", dense=(64, "Tanh")),
        "lasttoken": lambda p: st_saved.save_st(p, "lasttoken", normalize=False),
        "weightedmean": lambda p: st_saved.save_st(p, "weightedmean"),
        "max": lambda p: st_saved.save_st(p, "max"),
        "mean_sqrt_len_tokens": lambda p: st_saved.save_st(p, "mean_sqrt_len_tokens"),
        "cls+mean": lambda p: st_saved.save_st(p, ("cls", "mean")),
        "legacy_mean": lambda p: st_saved.save_legacy(p, "mean_tokens", max_seq_length=100),
        "legacy_cls_no_lower_case": lambda p: st_saved.save_legacy(p, "cls_token", normalize=False,
                                                                    max_seq_length=64, do_lower_case=None),
        "legacy_lasttoken": lambda p: st_saved.save_legacy(p, "lasttoken"),
        "legacy_weightedmean": lambda p: st_saved.save_legacy(p, "weightedmean_tokens"),
        "legacy_cls+mean": lambda p: st_saved.save_legacy(p, ("cls_token", "mean_tokens")),
        "prompts_excluded": lambda p: st_saved.save_st(p, "mean", prompts={"query": "query: "},
                                                       default_prompt_name="query", include_prompt=False),
        "no_prompt_excluded": lambda p: st_saved.save_st(p, "mean", include_prompt=False),
        "ce_identity": lambda p: st_saved.save_cross_encoder(p, "Identity", max_length=64),
        "ce_default_3_labels": lambda p: st_saved.save_cross_encoder(p, None, num_labels=3),
        "ce_default_1_label": lambda p: st_saved.save_cross_encoder(p, None),
    }
    made = {}

    def get(name: str) -> str:
        if name not in made:
            made[name] = str(makers[name](root / name.replace("+", "_")))
        return made[name]

    return get


@pytest.mark.parametrize(("name", "pooling", "normalize"), [
    ("mean_normalize", "MEAN", True),
    ("cls_dense", "CLS", True),
    ("lasttoken", "LAST", False),
    ("legacy_mean", "MEAN", True),
    ("legacy_cls_no_lower_case", "CLS", False),
    ("legacy_lasttoken", "LAST", True),
    ("weightedmean", "WEIGHTEDMEAN", True),
    ("max", "MAX", True),
    ("mean_sqrt_len_tokens", "MEAN_SQRT_LEN", True),
    ("legacy_weightedmean", "WEIGHTEDMEAN", True),
])
def test_pooling_mode_and_normalize_are_read(real_config, saved, name, pooling, normalize):
    pooler = real_config(saved(name), "pooling").model_config.pooler_config
    assert pooler.seq_pooling_type == pooling
    assert pooler.use_activation is normalize


@pytest.mark.parametrize("name", ["cls+mean", "legacy_cls+mean"])
def test_concatenated_pooling_modes_are_refused_at_startup(real_config, saved, name):
    with pytest.raises(ValueError) as e:
        real_config(saved(name), "pooling")
    message = str(e.value)
    assert "sentence-transformers pooling modes ['cls', 'mean'] concatenated" in message
    assert "1_Pooling/config.json" in message and "seq_pooling_type" in message


def test_pooling_mode_refused_unless_the_user_chooses_the_pooling(real_config, saved):
    from vllm.config import PoolerConfig

    config = real_config(saved("cls+mean"), "pooling", pooler_config=PoolerConfig(seq_pooling_type="MEAN"))
    assert config.model_config.pooler_config.seq_pooling_type == "MEAN"


@pytest.mark.parametrize("pooling", ["MAX", "MEAN_SQRT_LEN", "WEIGHTEDMEAN"])
def test_whole_prompt_poolings_turn_chunked_prefill_off_on_a_decoder(real_config, tiny_qwen3, pooling):
    # like MEAN and CLS, these pool every token of the prompt at once
    from vllm.config import PoolerConfig

    config = real_config(tiny_qwen3, "pooling", pooler_config=PoolerConfig(seq_pooling_type=pooling))
    assert config.model_config.attn_type == "decoder"
    assert config.model_config.is_chunked_prefill_supported is False
    assert config.model_config.is_prefix_caching_supported is False


def test_dense_module_sets_the_embedding_size(real_config, saved):
    assert real_config(saved("cls_dense"), "pooling").model_config.embedding_size == 64
    assert real_config(saved("mean_normalize"), "pooling").model_config.embedding_size == 128


@pytest.mark.parametrize(("name", "max_len"), [
    ("mean_normalize", 128),  # Transformer(max_seq_length=128): tokenizer model_max_length
    ("ce_identity", 64),  # CrossEncoder(max_length=64): tokenizer model_max_length
    ("legacy_mean", 100),  # sentence_bert_config.json max_seq_length
    ("legacy_cls_no_lower_case", 64),  # max_seq_length without do_lower_case
])
def test_max_length_is_read(real_config, saved, name, max_len):
    runner = "pooling"
    assert real_config(saved(name), runner).model_config.max_model_len == max_len


@pytest.mark.parametrize(("name", "activation"), [
    ("ce_identity", "PoolerIdentity"),  # activation_fn=Identity() in config_sentence_transformers.json
    ("ce_default_3_labels", "PoolerIdentity"),  # sentence-transformers' default for 3 labels
    ("ce_default_1_label", "PoolerClassify"),  # Sigmoid for one label
])
def test_cross_encoder_activation_is_read(real_config, saved, name, activation):
    from vllm.model_executor.layers.pooler.activations import get_act_fn

    config = real_config(saved(name), "pooling")
    assert type(get_act_fn(config.model_config.hf_config)).__name__ == activation


def test_prompt_excluded_from_pooling_is_refused_at_startup(real_config, saved):
    # Pooling(include_prompt=False): sentence-transformers pools the text without the
    # prompt's tokens; vLLM would pool them with the rest
    with pytest.raises(ValueError) as e:
        real_config(saved("prompts_excluded"), "pooling")
    message = str(e.value)
    assert "include_prompt: false" in message and "1_Pooling/config.json" in message
    assert "'query: '" in message and "include_prompt to true" in message


def test_include_prompt_false_without_prompts_is_served(real_config, saved):
    # no prompt to exclude: sentence-transformers pools every token, as vLLM does
    pooler = real_config(saved("no_prompt_excluded"), "pooling").model_config.pooler_config
    assert pooler.seq_pooling_type == "MEAN"


def test_default_prompt_name_without_its_prompt_is_refused_at_startup(real_config, saved, tmp_path):
    # sentence-transformers refuses to load such a model ("Default prompt name ... not found")
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(saved("mean_normalize"), model)
    st_config = json.loads((model / "config_sentence_transformers.json").read_text())
    st_config.update(prompts={"query": "query: "}, default_prompt_name="passage")
    (model / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    with pytest.raises(ValueError) as e:
        real_config(str(model), "pooling")
    assert "default_prompt_name 'passage'" in str(e.value) and "['query']" in str(e.value)
