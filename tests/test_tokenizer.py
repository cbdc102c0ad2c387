"""The WordPiece tokenizer we train is a lower-cased BERT tokenizer that survives saving and loading."""
from __future__ import annotations

import pytest
import transformers

from bert_demo.tokenizer import SPECIAL_TOKENS, load_tokenizer, tokenizer_from_vocab, train_tokenizer, vocabulary
from tests.conftest import SENTENCES


def test_special_tokens_have_bert_ids_and_pad_is_zero(tokenizer):
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    assert tokenizer.pad_token_id == 0


def test_text_is_lower_cased_and_split_into_wordpieces(tokenizer):
    tokens = tokenizer.tokenize("PARIS is the Capital of Francey")
    assert tokens[:5] == ["paris", "is", "the", "capital", "of"]
    assert any(t.startswith("##") for t in tokens[5:])


def test_pair_encoding_is_cls_a_sep_b_sep_with_segments(tokenizer):
    enc = tokenizer("the cat sat.", "the dog sat.")
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    first_sep = tokens.index("[SEP]")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert enc["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)


def test_vocabulary_size_is_kept_after_save_and_load(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    assert len(load_tokenizer(tmp_path)) == len(tokenizer)
    assert len(transformers.AutoTokenizer.from_pretrained(tmp_path)) == len(tokenizer)


def test_requested_vocabulary_size_is_reached_on_enough_text():
    words = [f"word{i} token{i * 7} thing{i % 13}" for i in range(3000)]
    tokenizer = train_tokenizer([words], vocab_size=500, min_frequency=1)
    assert len(tokenizer) == 500


@pytest.mark.parametrize("size", [0, 10, 10**7, "big"])
def test_bad_vocabulary_size_is_refused(size):
    with pytest.raises(ValueError, match="vocabulary size"):
        train_tokenizer([SENTENCES], vocab_size=size)


def test_trained_ids_do_not_depend_on_the_order_the_trainer_happened_to_use(tokenizer):
    """tokenizers' trainer orders equal-count entries by per-process hash seeds; sorted entries keep ids repeatable."""
    tokens = vocabulary(tokenizer)
    assert tokens[:len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
    assert tokens[len(SPECIAL_TOKENS):] == sorted(tokens[len(SPECIAL_TOKENS):])


def test_a_tokenizer_rebuilt_from_its_vocabulary_encodes_identically(tokenizer):
    rebuilt = tokenizer_from_vocab(vocabulary(tokenizer))
    assert rebuilt.get_vocab() == tokenizer.get_vocab()
    for text in ["The cat sat on the MAT.", "Albert Einstein's théory, 1905!", "[MASK] is [SEP] odd"]:
        assert rebuilt(text, "second part")["input_ids"] == tokenizer(text, "second part")["input_ids"]
