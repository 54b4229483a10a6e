"""Issue 28, item 1 (patch 0042): token ids a client sends are checked
against the model's vocabulary before they reach the engine.

- ``max_token_id`` of vLLM's cached Hugging Face tokenizer is the largest
  token id (all-MiniLM-L6-v2: 30,521 of 30,522 word pieces), not the
  vocabulary size; with an added token, that token's id.
- ``InputProcessor.process_inputs`` refuses a prompt with an id below 0 or
  at or above the vocabulary size with a ``ValueError`` naming the id, its
  position and the range [0, 30522); the largest id passes. The same holds
  for an engine without a tokenizer (``skip_tokenizer_init=True``), whose
  range is the model's vocabulary. Built from real engine configs (no
  weights loaded); upstream names only."""

from __future__ import annotations

import pytest

VOCAB = 30522
BAD = [([101, -1, 102], -1, 1), ([101, 2023, VOCAB, 102], VOCAB, 2), ([-7, VOCAB + 5], -7, 0)]


def test_cached_tokenizer_max_token_id_is_the_largest_id(minilm):
    from transformers import AutoTokenizer

    from vllm.tokenizers.hf import get_cached_tokenizer

    tok = AutoTokenizer.from_pretrained(minilm)
    assert (tok.vocab_size, len(tok)) == (VOCAB, VOCAB)
    assert get_cached_tokenizer(tok).max_token_id == VOCAB - 1


def test_cached_tokenizer_max_token_id_counts_added_tokens(minilm):
    from transformers import AutoTokenizer

    from vllm.tokenizers.hf import get_cached_tokenizer

    tok = AutoTokenizer.from_pretrained(minilm)
    tok.add_tokens(["<extra-token>"])
    assert tok.convert_tokens_to_ids("<extra-token>") == VOCAB
    assert get_cached_tokenizer(tok).max_token_id == VOCAB


def processor(model: str, **engine_args):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor

    return InputProcessor(EngineArgs(model=model, runner="pooling", **engine_args).create_engine_config())


def process(proc, ids):
    from vllm import PoolingParams
    from vllm.inputs import TokensPrompt

    return proc.process_inputs("req", TokensPrompt(prompt_token_ids=ids), PoolingParams(task="embed"),
                               supported_tasks=("embed",))


@pytest.mark.parametrize("engine_args", [{}, {"skip_tokenizer_init": True}], ids=["tokenizer", "no-tokenizer"])
def test_token_ids_outside_the_vocabulary_are_refused(minilm, engine_args):
    proc = processor(minilm, **engine_args)
    assert (proc.tokenizer is None) == bool(engine_args)
    from vllm.exceptions import VLLMValidationError

    for ids, bad, position in BAD:
        with pytest.raises(VLLMValidationError) as e:
            process(proc, ids)
        assert str(e.value).startswith(f"Token id {bad} is out of vocabulary"), str(e.value)
        assert f"position {position}" in str(e.value) and f"[0, {VOCAB})" in str(e.value), str(e.value)
    assert process(proc, [0, 101, VOCAB - 1, 102]).prompt_token_ids == [0, 101, VOCAB - 1, 102]
