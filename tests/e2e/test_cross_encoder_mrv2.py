"""Cross-encoders on MRV2 (patch 0010): a BERT cross-encoder scores each
(query, document) pair with token type ids, 0 for the query and 1 for the
document; MRV2, chosen by default, passes them to the model as the V1 runner
does, and ``LLM.score`` equals transformers' score of the pair. Before the
patch MRV2 scored every pair as if all its tokens had type 0."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.validation.engine import vllm_runner
from scripts.validation.checkpoints.models import TINY_BERT, copy_tokenizer

TOL = 1e-4
QUERY = "how do cats sleep"
DOCS = ["cats sleep most of the day, often in short naps",
        "the stock market closed higher on friday",
        "a kitten curled up on the warm windowsill and slept",
        "dogs and cats are common pets in many households"]


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    """A random-weight BertForSequenceClassification with one label (a
    relevance score, as ms-marco-MiniLM rerankers), 2 layers, hidden 128,
    token type vocabulary 2 with its type embeddings scaled up so that the
    types move the score well beyond the tolerance."""
    import torch
    import transformers

    dest = tmp_path_factory.mktemp("cross-encoder") / "bert-cross-encoder"
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY_BERT, num_labels=1, type_vocab_size=2)
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.bert.embeddings.token_type_embeddings.weight.mul_(20)
    model.save_pretrained(dest)
    copy_tokenizer(dest)
    return dest


def hf_scores(model_dir, query, docs, with_types=True) -> np.ndarray:
    """transformers' relevance scores: sigmoid of the single logit of each
    tokenised pair, with its token type ids (or all set to 0)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for doc in docs:
            enc = tok(query, doc, return_tensors="pt")
            if not with_types:
                enc["token_type_ids"] = torch.zeros_like(enc["token_type_ids"])
            out.append(torch.sigmoid(model(**enc).logits[0, 0]).item())
    return np.asarray(out)


@pytest.mark.parametrize("runner", ["default", "v1"])
def test_cross_encoder_score_uses_token_types(cross_encoder, runner):
    ref = hf_scores(cross_encoder, QUERY, DOCS)
    untyped = hf_scores(cross_encoder, QUERY, DOCS, with_types=False)
    assert abs(ref - untyped).min() > 10 * TOL  # the types matter for every pair
    with vllm_runner(cross_encoder, runner) as llm:  # MRV2 by default, V1 asked: asserted
        got = np.asarray([o.outputs.score for o in llm.score(QUERY, DOCS, use_tqdm=False)])
        # one request whose pair has no document part: types all 0 there
        alone = llm.score(QUERY, [DOCS[0]], use_tqdm=False)[0].outputs.score
    np.testing.assert_allclose(got, ref, rtol=0, atol=TOL)
    assert abs(alone - ref[0]) <= TOL
