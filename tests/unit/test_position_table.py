"""Issue 38 item 2 (patch 0062): a model whose position table is offset by
the padding index (RoBERTa, XLM-R and the models built like them) gets a
``max_model_len`` that fits its table, whatever transformers version saved
its config; a model with a table of absolute positions reads its tokenizer's
``model_max_length`` whether or not its config writes
``position_embedding_type`` (transformers 5 no longer does).

The number of positions that fit is transformers' own: its model runs 128
tokens through a 130-row table with padding index 1, and raises
``IndexError`` at 129. Before 0062 the reranker below got ``max_model_len``
130 and scored a 130-token pair. The 400 a longer request gets from
``vllm serve`` is in ``tests/e2e/test_fault_st_modules.py``."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from scripts.validation.checkpoints.zoo import make_hf, make_tiny_bert

pytestmark = pytest.mark.line("0.32.0", "0.34.0")

XLMR_RERANKER = partial(make_hf, config_cls="XLMRobertaConfig", model_cls="XLMRobertaForSequenceClassification",
                        tokenizer="bpe", pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                        num_labels=1)


def with_files(path: Path, dest: Path, model_max_length: int | None = None, **config) -> Path:
    """A copy of ``path`` with ``config`` set in config.json and the
    tokenizer's ``model_max_length``."""
    import shutil

    shutil.copytree(path, dest)
    if config:
        data = json.loads((dest / "config.json").read_text())
        (dest / "config.json").write_text(json.dumps({**data, **config}))
    if model_max_length is not None:
        data = json.loads((dest / "tokenizer_config.json").read_text())
        (dest / "tokenizer_config.json").write_text(json.dumps({**data, "model_max_length": model_max_length}))
    return dest


def run(model, tokens: int):
    """``model`` on one input of ``tokens`` tokens (token type ids given, so
    only the position table can be too short)."""
    import torch

    ids = torch.full((1, tokens), 5)
    return model(input_ids=ids, token_type_ids=torch.zeros_like(ids))


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    return XLMR_RERANKER(tmp_path_factory.mktemp("xlmr") / "reranker", max_position_embeddings=130)


def test_transformers_fits_128_tokens_in_the_table(reranker):
    import torch
    from transformers import AutoModelForSequenceClassification

    assert "position_embedding_type" not in json.loads((reranker / "config.json").read_text())
    model = AutoModelForSequenceClassification.from_pretrained(reranker).eval()
    with torch.no_grad():
        run(model, 128)
        with pytest.raises(IndexError):
            run(model, 129)


@pytest.mark.parametrize(("model_max_length", "key"), [
    (128, None),  # the checkpoint: saved by transformers 5
    (128, "absolute"),  # the same with the key written out
    (512, None),  # a tokenizer that allows more than the table holds
    (None, None),  # left as the tokenizer was saved (512)
])
def test_an_offset_table_caps_max_model_len(real_config, reranker, tmp_path, model_max_length, key):
    extra = {"position_embedding_type": key} if key else {}
    model = with_files(reranker, tmp_path / "m", model_max_length, **extra)
    config = real_config(str(model), "pooling")
    assert config.model_config.max_model_len == 128


def test_asking_for_more_than_the_table_holds_is_refused(real_config, reranker):
    with pytest.raises(ValueError) as e:
        real_config(str(reranker), "pooling", max_model_len=130)
    assert "max_position_embeddings - pad_token_id - 1" in str(e.value)


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta", "camembert", "xlm-roberta-xl",
                                        "roberta-prelayernorm", "data2vec-text"])
def test_every_offset_family_fits_its_table(model_type):
    import torch
    from transformers import AutoConfig, AutoModel

    from vllm.transformers_utils.model_arch_config_convertor import MODEL_ARCH_CONFIG_CONVERTORS

    config = AutoConfig.for_model(model_type, vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=20,
                                  pad_token_id=3)
    fits = 20 - 3 - 1
    model = AutoModel.from_config(config).eval()
    with torch.no_grad():
        run(model, fits)
        with pytest.raises(IndexError):
            run(model, fits + 1)
    convertor = MODEL_ARCH_CONFIG_CONVERTORS[model_type](config, config)
    assert convertor.derive_max_model_len_and_key()[0] == fits


def test_bert_saved_by_transformers_5_reads_its_tokenizer_max_length(real_config, tmp_path):
    # BERT's table is not offset (512 rows, 512 tokens); transformers 5 writes
    # no position_embedding_type, so the tokenizer's 128 was not read
    bert = make_tiny_bert(tmp_path / "bert", "base")
    assert "position_embedding_type" not in json.loads((bert / "config.json").read_text())
    assert real_config(str(bert), "pooling").model_config.max_model_len == 512
    short = with_files(bert, tmp_path / "short", 128)
    assert real_config(str(short), "pooling").model_config.max_model_len == 128


def test_rotary_positions_are_not_offset():
    from transformers import XLMRobertaConfig

    from vllm.transformers_utils.model_arch_config_convertor import MODEL_ARCH_CONFIG_CONVERTORS

    config = XLMRobertaConfig(max_position_embeddings=8194, pad_token_id=1)
    config.position_embedding_type = "rotary"  # Jina's XLM-R (jina-embeddings-v3, its ColBERT)
    assert MODEL_ARCH_CONFIG_CONVERTORS["xlm-roberta"](config, config).derive_max_model_len_and_key()[0] == 8194
