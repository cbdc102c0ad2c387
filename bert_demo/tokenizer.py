"""WordPiece tokenizer (Wu et al. 2016; BERT §3): trained on our corpus, used as a `transformers` fast tokenizer.

We train with the `tokenizers` library (lower-cased, BERT's five special tokens, [PAD] = 0) and wrap the result in
`BertTokenizerFast`, so `save_pretrained` writes the files `transformers` expects (vocab.txt, tokenizer.json, ...).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import BertWordPieceTokenizer
from transformers import BertTokenizerFast

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4 in a vocabulary we train
MIN_VOCAB_SIZE = 128
MAX_VOCAB_SIZE = 65536
MAX_LENGTH = 512  # BERT's position embeddings stop here


def train_tokenizer(
    documents: Iterable[list[str]], vocab_size: int = 8192, min_frequency: int = 2
) -> BertTokenizerFast:
    """Learn a lower-cased WordPiece vocabulary of at most `vocab_size` entries from documents of sentences.

    The `tokenizers` trainer orders equally frequent entries differently from call to call (its hash maps are
    seeded per process): on news + wiki with 8,192 entries, two calls gave the same entries with 362 in other places.
    The entries after the special tokens are therefore sorted, so the same entries always get the same ids and a
    seeded run can be repeated exactly. Ties at the size limit can still swap a few rare entries in or out (seen on
    the 103 wiki articles with 4,096 entries): share one trained tokenizer where exact repeats matter.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise ValueError(f"vocabulary size must be an integer, got {vocab_size!r}")
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise ValueError(f"vocabulary size must be between {MIN_VOCAB_SIZE} and {MAX_VOCAB_SIZE}, got {vocab_size}")
    wordpiece = BertWordPieceTokenizer(lowercase=True, clean_text=True, handle_chinese_chars=True)
    wordpiece.train_from_iterator(
        _sentences(documents),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        limit_alphabet=1000,
        wordpieces_prefix="##",
    )
    tokens = sorted(set(wordpiece.get_vocab()) - set(SPECIAL_TOKENS))
    if not tokens:
        raise ValueError("the corpus is too small to learn a vocabulary from")
    return tokenizer_from_vocab(SPECIAL_TOKENS + tokens)


def wrap(wordpiece: BertWordPieceTokenizer) -> BertTokenizerFast:
    """Turn a trained `tokenizers` WordPiece tokenizer into a `transformers` BertTokenizerFast."""
    return BertTokenizerFast(
        tokenizer_object=wordpiece._tokenizer,
        do_lower_case=True,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        model_max_length=MAX_LENGTH,
    )


def tokenizer_from_vocab(tokens: list[str]) -> BertTokenizerFast:
    """A lower-cased BERT tokenizer whose vocabulary is `tokens`, ids in list order (as a vocab.txt reads)."""
    return wrap(BertWordPieceTokenizer({token: i for i, token in enumerate(tokens)}, lowercase=True,
                                       clean_text=True, handle_chinese_chars=True))


def vocabulary(tokenizer: BertTokenizerFast) -> list[str]:
    """The tokens in id order (the lines of vocab.txt)."""
    return [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]


def load_tokenizer(folder: str | Path) -> BertTokenizerFast:
    """Load a tokenizer saved with `save_pretrained` (ours or Hugging Face's), checking it is usable for BERT."""
    tokenizer = BertTokenizerFast.from_pretrained(str(folder))
    missing = [t for t in ("mask_token", "cls_token", "sep_token", "pad_token") if getattr(tokenizer, t) is None]
    if missing or len(tokenizer) <= len(SPECIAL_TOKENS):
        raise ValueError(f"the tokenizer in {folder} is not a usable BERT tokenizer (missing: {missing or 'vocab'})")
    return tokenizer


def _sentences(documents: Iterable[list[str]]) -> Iterator[str]:
    for document in documents:
        yield from document
