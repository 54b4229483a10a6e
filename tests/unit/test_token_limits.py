"""Issue 28 item 3 (patch 0046): ``max_tokens_per_query`` /
``max_tokens_per_doc`` cut a text so that it re-tokenises to at most the
limit. With byte-level BPE a character can be split over several tokens
(``é`` is two bytes, two tokens here): a cut after the first of them kept
the whole character, one token too many ("café" for a limit of 3 is 4
tokens). The cut is the scoring entries' own helper
(``truncate_text_to_tokens``, used by /score, /rerank and LLM.score on
every scoring path); the tokenizer is a RoBERTa-style byte-level BPE
trained on STS-B (``scripts.validation.checkpoints.zoo.bpe_tokenizer``)."""

from __future__ import annotations

import pytest

TEXT = "café au lait"


@pytest.fixture(scope="module")
def bpe():
    from transformers import AutoTokenizer

    from scripts.validation.checkpoints.zoo import BPE_DIR, bpe_tokenizer

    return AutoTokenizer.from_pretrained(str(bpe_tokenizer(BPE_DIR)))


def count(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_the_text_splits_a_character_over_two_tokens(bpe):
    assert bpe.convert_ids_to_tokens(bpe(TEXT, add_special_tokens=False)["input_ids"])[:4] == ["c", "af", "Ã", "©"]


@pytest.mark.parametrize("limit", range(1, 9))
def test_cut_retokenises_to_at_most_the_limit(bpe, limit):
    from vllm.entrypoints.pooling.scoring.utils import truncate_text_to_tokens

    cut = truncate_text_to_tokens(TEXT, bpe, limit)
    assert TEXT.startswith(cut)
    assert count(bpe, cut) <= limit
    # the longest prefix ending at a token boundary that fits: one more token would not
    assert cut == max((TEXT[:end] for end in range(len(TEXT) + 1) if count(bpe, TEXT[:end]) <= limit
                       and (end == len(TEXT) or TEXT[:end] == truncate_boundary(bpe, end))), key=len)


def truncate_boundary(tok, end: int) -> str:
    """``TEXT[:end]`` when ``end`` is where one of its tokens ends."""
    enc = tok(TEXT, add_special_tokens=False, return_offsets_mapping=True)
    return TEXT[:end] if any(e == end for _, e in enc["offset_mapping"]) else ""
