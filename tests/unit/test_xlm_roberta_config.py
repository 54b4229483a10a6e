"""Patch 0014: an XLM-RoBERTa checkpoint whose config.json has no
``position_embedding_type`` (transformers 5 no longer writes it) builds its
engine config; before, ``JinaRobertaModelConfig`` raised AttributeError on
every runner."""

from __future__ import annotations

import json
from functools import partial

from scripts.validation.checkpoints.zoo import make_hf

XLMR = partial(make_hf, config_cls="XLMRobertaConfig", model_cls="XLMRobertaModel", tokenizer="bpe",
               pad_token_id=1, bos_token_id=0, eos_token_id=2, max_position_embeddings=514, type_vocab_size=1)


def test_xlm_roberta_without_position_embedding_type_builds_its_config(tmp_path, real_config):
    path = XLMR(tmp_path / "xlmr")
    assert "position_embedding_type" not in json.loads((path / "config.json").read_text())
    config = real_config(str(path), "pooling")
    assert config.model_config.architecture == "XLMRobertaModel"
    assert config.model_config.pooler_config.seq_pooling_type == "CLS"
