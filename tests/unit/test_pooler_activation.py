"""``use_activation`` switches off the task's final activation only, never a
layer of the model (issue 18 item 2, patch 0021).

Every pooler whose head carries model layers is built here as its model
builds it, under the ``VllmConfig`` of a real local checkpoint, and run on
transformers' last hidden state of the same weights (fp32), with the
activation on and off:

- BERT sequence classification (``BertPooler``: dense + tanh, then the
  classifier; GTE's ``GteNewForSequenceClassification`` uses the same
  ``BertPooler``): the issue's input, 3 labels, "terrible service, never
  again". Off must give transformers' logits, on their softmax.
- ModernBERT sequence classification (``ModernBertPooler``: dense, GELU,
  LayerNorm, then the classifier): same.
- BGE-M3's sparse weights (``token_classify``): ReLU of a linear layer, as
  FlagEmbedding's ``BGEM3Model._sparse_embedding`` defines them; the ReLU is
  part of the model, so the output is the same with the switch on or off.

Before 0021 the tanh, the GELU + LayerNorm and the ReLU were each built as
the head's "activation", so ``use_activation=False`` removed them.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vllm.pooling_params import PoolingParams
from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

TEXT = "terrible service, never again"
TOL = 1e-4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from scripts.validation.checkpoints.zoo import make_tiny_bert, make_tiny_modernbert

    root = tmp_path_factory.mktemp("pooler-activation")
    return {"bert": str(make_tiny_bert(root / "bert-seq-cls-3", "seq_cls", num_labels=3)),
            "modernbert": str(make_tiny_modernbert(root / "modernbert-seq-cls-3", num_labels=3))}


def metadata(num_tokens: int, task: str, use_activation: bool, config, token_ids=None) -> PoolingMetadata:
    params = PoolingParams(task=task, use_activation=use_activation)
    params.verify(config.model_config)
    ids = None if token_ids is None else torch.tensor([token_ids])
    md = PoolingMetadata(prompt_lens=torch.tensor([num_tokens]), prompt_token_ids=ids,
                         prompt_token_ids_cpu=ids, pooling_params=[params],
                         pooling_states=[PoolingStates()])
    md.build_pooling_cursor(np.array([num_tokens]), torch.tensor([num_tokens]), torch.device("cpu"))
    return md


def hf_run(model_dir: str, base_attr: str):
    """transformers' sequence classifier on TEXT: (its backbone's last hidden
    state [n, d], its logits [labels], the model)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    net = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    enc = tok(TEXT, return_tensors="pt")
    with torch.inference_mode():
        hidden = getattr(net, base_attr)(input_ids=enc["input_ids"]).last_hidden_state[0]
        logits = net(input_ids=enc["input_ids"]).logits[0]
    return hidden, logits, net


def assert_switch_keeps_the_head(real_config, model_dir: str, base_attr: str, make_head) -> None:
    """The sequence classifier at ``model_dir`` as its vLLM model builds its
    pooler: ``make_head(model_config, net)`` (the model's pooling head with
    transformers' weights, built under the engine's config), then
    ``DispatchPooler.for_seq_cls`` with transformers' classifier, run on
    transformers' last hidden state of TEXT. ``use_activation=False`` must give
    transformers' logits (the head's layers kept), ``True`` their softmax."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.pooler import DispatchPooler

    hidden, logits, net = hf_run(model_dir, base_attr)
    config = real_config(model_dir, "pooling")
    with set_current_vllm_config(config):
        pooler = DispatchPooler.for_seq_cls(config.model_config.pooler_config,
                                            pooling=make_head(config.model_config, net), classifier=net.classifier)
    with torch.inference_mode():
        out = {flag: pooler(hidden, metadata(hidden.shape[0], "classify", flag, config))[0] for flag in (False, True)}
    torch.testing.assert_close(out[False], logits, atol=TOL, rtol=0)
    torch.testing.assert_close(out[True], logits.softmax(-1), atol=TOL, rtol=0)


def test_bert_seq_cls_switch_keeps_the_pooler_tanh(real_config, models):
    from vllm.model_executor.models.bert import BertPooler

    def head(model_config, net):
        pooler = BertPooler(model_config)
        pooler.dense.load_state_dict(net.bert.pooler.dense.state_dict())
        return pooler

    assert_switch_keeps_the_head(real_config, models["bert"], "bert", head)


def test_modernbert_seq_cls_switch_keeps_the_head_layers(real_config, models):
    from vllm.model_executor.models.modernbert import ModernBertPooler

    def head(model_config, net):
        pooler = ModernBertPooler(model_config)
        pooler.dense.load_state_dict(net.head.dense.state_dict())
        pooler.norm.load_state_dict(net.head.norm.state_dict())
        return pooler

    assert_switch_keeps_the_head(real_config, models["modernbert"], "model", head)


def test_bge_m3_sparse_weights_keep_their_relu(real_config, models):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.roberta import BgeM3EmbeddingModel

    config = real_config(models["bert"], "pooling")
    # The attributes BgeM3EmbeddingModel._build_pooler reads; bos/eos -1:
    # no token filtered, so every token's weight is compared.
    model = SimpleNamespace(hidden_size=128, head_dtype=torch.float32, bos_token_id=-1,
                            eos_token_id=-1)
    with set_current_vllm_config(config):
        pooler = BgeM3EmbeddingModel._build_pooler(model, config.model_config.pooler_config)
    torch.manual_seed(0)
    hidden = torch.randn(9, 128)
    token_ids = list(range(1000, 1009))
    with torch.inference_mode():
        # FlagEmbedding: token weights = relu(sparse_linear(last_hidden_state))
        expected = torch.relu(model.sparse_linear(hidden)).squeeze(-1)
        assert (model.sparse_linear(hidden) < 0).any()  # the ReLU matters here
        for flag in (False, True):
            got = pooler(hidden, metadata(9, "token_classify", flag, config, token_ids))[0]
            torch.testing.assert_close(got, expected, atol=TOL, rtol=0, msg=lambda m, flag=flag: f"{flag}: {m}")
