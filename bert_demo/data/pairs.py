"""BERT's pre-training examples: sentence pairs for next-sentence prediction, masked fresh every time they are drawn.

Follows google-research/bert `create_pretraining_data.py` (Devlin et al. 2019, §3.1 and Appendix A.1):
- an example fills a target of max_seq_len - 3 tokens (sometimes shorter, with probability short_seq_prob), so the
  model also sees short inputs; segment A is a run of consecutive sentences;
- segment B is the true continuation half of the time, otherwise sentences from a different, random document
  (the unused sentences of the current document are put back, so no text is wasted); given each document's
  source, that document is one of the same source (where it has another), so that in a mix of sources B's style
  says nothing about whether it follows A;
- the pair is truncated to fit, one token at a time from the longer side, at its front or back at random;
- masking happens in the collator, fresh each time an example is drawn (RoBERTa's "dynamic masking"): 15% of the
  non-special tokens (at most max_predictions), of which 80% become [MASK], 10% a random token, 10% stay; a recipe
  may pick a rate falling over the run, or runs of consecutive tokens (span masking).

Shapes: B batch, T tokens (the longest example in the batch).
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import random
from array import array
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from transformers import PreTrainedTokenizerBase

from bert_demo.data.collator import Example, MaskingCollator, SpecialIds
from bert_demo.data.masking import IS_NEXT_SHARE, masking_rate
from bert_demo.config import IS_NEXT, NOT_NEXT

Document = list[Sequence[int]]  # a document: sentences of token ids (int32 arrays), without special tokens
MIN_DOCUMENTS = 2  # in each split: a random "next sentence" must come from another document
MIN_SHARD_DOCUMENTS = 8  # fewer a shard, and the shards read the whole corpus and share its examples instead


class Tokenized(NamedTuple):
    """Documents as token ids, each with its source: the part of the corpus it came from (an index into
    `corpus.source_parts`), which a same-source draw of the random B keeps to."""

    documents: list[Document]
    sources: list[int]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Origin:
    """Where an example's two segments came from, among the documents it was made of (for showing how an example is
    made; training does not keep them)."""

    document: int  # A's document
    a_sentences: tuple[int, int]  # A's sentences of that document, [start, end)
    b_document: int  # B's document: A's own for the true next sentences, another for a random B
    b_sentences: tuple[int, int]  # B's sentences of its document, [start, end), before any cut
    cut: tuple[int, int, int, int]  # word pieces cut to fit: from A's front, A's back, B's front, B's back




def split_documents(documents: Sequence[list[str]], val_fraction: float, seed: int
                    ) -> tuple[list[list[str]], list[list[str]]]:
    """The documents kept for training and those held out for validation (`held_out`)."""
    return partition(documents, held_out(documents, val_fraction, seed))


def partition(items: Sequence, held: Sequence[bool]) -> tuple[list, list]:
    """`items` not held and held, each in order: documents, or what is known of each (their sources)."""
    pairs = list(zip(items, held, strict=True))
    return [item for item, out in pairs if not out], [item for item, out in pairs if out]


def held_out(documents: Sequence[list[str]], val_fraction: float, seed: int) -> list[bool]:
    """Which documents to hold out whole for validation (never sentences of a document seen in training).

    Whether a document is held out depends only on its text and the seed, not on its neighbours, so a document held
    out of a run on "news,wiki" is also held out when that run is evaluated on "news" alone.
    """
    if len(documents) < 2 * MIN_DOCUMENTS:
        raise ValueError(f"the corpus has {len(documents)} document(s); at least {2 * MIN_DOCUMENTS} are needed "
                         "(separate documents with a blank line): next-sentence prediction draws its random "
                         "sentences from other documents, in training and in validation")
    held = [_unit_hash(document, seed) < val_fraction for document in documents]
    if not MIN_DOCUMENTS <= sum(held) <= len(documents) - MIN_DOCUMENTS:  # a tiny corpus: the smallest hashes
        order = sorted(range(len(documents)), key=lambda i: _unit_hash(documents[i], seed))
        held = [False] * len(documents)
        for i in order[:MIN_DOCUMENTS]:
            held[i] = True
    return held


def _unit_hash(document: list[str], seed: int) -> float:
    """A stable number in [0, 1) for a document (Python's own hash() changes between processes)."""
    digest = hashlib.blake2b(f"{seed}\x00{' '.join(document[:3])}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def token_counts(documents: Sequence[Document], vocab_size: int) -> Tensor:
    """How often each token id occurs in tokenized documents (see `tokenize_documents`). Shape (vocab_size,)."""
    joined = array("i")
    for document in documents:
        for sentence in document:
            joined.extend(sentence)
    ids = torch.frombuffer(joined, dtype=torch.int32).long() if joined else torch.zeros(0, dtype=torch.long)
    return torch.bincount(ids, minlength=vocab_size)


def tokenize_documents(documents: Sequence[list[str]], tokenizer: PreTrainedTokenizerBase,
                       chunk: int = 4096) -> list[Document]:
    """Word-piece every sentence and drop sentences and documents left empty (`tokenize_sourced`, one source)."""
    return tokenize_sourced(documents, [0] * len(documents), tokenizer, chunk).documents


def tokenize_sourced(documents: Sequence[list[str]], sources: Sequence[int], tokenizer: PreTrainedTokenizerBase,
                     chunk: int = 4096) -> Tokenized:
    """Word-piece every sentence and drop sentences and documents left empty, each document's source kept beside it.

    Sentences go to the fast tokenizer `chunk` at a time (a single call over a whole corpus holds every sentence's
    offsets and token strings at once: hundreds of MB), and are kept as compact int32 arrays.
    """
    sentences = [s for document in documents for s in document]
    ids: list[array] = []
    for start in range(0, len(sentences), chunk):
        encoded = tokenizer(sentences[start:start + chunk], add_special_tokens=False, return_attention_mask=False,
                            return_token_type_ids=False)["input_ids"]
        ids.extend(array("i", sentence) for sentence in encoded)
    out, start = Tokenized([], []), 0
    for document, source in zip(documents, sources, strict=True):
        tokenized = [s for s in ids[start:start + len(document)] if s]
        start += len(document)
        if tokenized:
            out.documents.append(tokenized)
            out.sources.append(source)
    return out


def create_examples(documents: Sequence[Document], special: SpecialIds, max_seq_len: int, rng: random.Random,
                    short_seq_prob: float = 0.1, sources: Sequence[int] | None = None,
                    origins: list[Origin] | None = None) -> list[Example]:
    """One pass over the corpus: every document cut into sentence-pair examples (the reference's dupe_factor=1),
    each random B from another document of its A's source if `sources` (each document's) are given (`RandomB`),
    then shuffled. `origins`, where given, receives each example's `Origin`, in the same order."""
    if len(documents) < 2:
        raise ValueError("next-sentence prediction needs at least two documents")
    examples, made, owed, draw = [], [] if origins is not None else None, [0], RandomB(len(documents), sources)
    for index in range(len(documents)):
        examples.extend(_document_examples(documents, index, special, max_seq_len, rng, short_seq_prob, owed, draw,
                                           made))
    order = list(range(len(examples)))
    rng.shuffle(order)  # the same draws, and so the same order, as shuffling the examples themselves
    if origins is not None:
        origins.extend(made[i] for i in order)
    return [examples[i] for i in order]


class RandomB:
    """Which document a random B comes from. The paper's (§3.1; google-research/bert's create_pretraining_data.py):
    any other document of the corpus. Given each document's source: another document of the same source, so that in
    a mix of very different sources (chat beside news) B's style does not give away that it does not follow A, and
    the next-sentence head must learn whether B continues A. A document whose source has no other one among the
    documents at hand (a data worker's share) draws from any other, as the paper does."""

    def __init__(self, count: int, sources: Sequence[int] | None = None):
        if sources is not None and len(sources) != count:
            raise ValueError(f"{len(sources)} sources for {count} documents")
        self.count, self.sources = count, sources
        self.peers: dict[int, list[int]] = {}  # each source's documents, in order
        for index, source in enumerate(sources or ()):
            self.peers.setdefault(source, []).append(index)

    def document(self, index: int, rng: random.Random) -> int:
        """A random document other than document `index`: of its source where that has another, else of any."""
        peers = self.peers[self.sources[index]] if self.sources is not None else ()
        if len(peers) < 2:
            other = rng.randrange(self.count - 1)
            return other + (other >= index)
        other = rng.randrange(len(peers) - 1)
        return peers[other + (other >= bisect.bisect_left(peers, index))]  # any peer but document `index`


def _document_examples(documents: Sequence[Document], index: int, special: SpecialIds, max_seq_len: int,
                       rng: random.Random, short_seq_prob: float, owed: list[int], draw: RandomB,
                       origins: list[Origin] | None) -> list[Example]:
    """Pack consecutive sentences of documents[index] into chunks, each split into A and B (true or random), each
    example's `Origin` appended to `origins` where given.

    A one-sentence chunk can only take a random B; `owed` counts those, and the next chunks that could go either way
    take the true continuation instead of a coin flip, so the NSP labels stay balanced (the reference code skews
    towards "random" on documents with long sentences).
    """
    document, max_tokens = documents[index], max_seq_len - 3  # room for [CLS], [SEP], [SEP]
    target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    examples, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            start, a_end = i + 1 - len(chunk), rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s]
            forced = len(chunk) == 1
            owed[0] += forced
            if forced or (owed[0] == 0 and rng.random() < 1 - IS_NEXT_SHARE):
                b_document = draw.document(index, rng)
                tokens_b, b_sentences = _random_segment(documents[b_document], target - len(tokens_a), rng)
                label = NOT_NEXT
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                b_document, b_sentences = index, (start + a_end, start + len(chunk))
                tokens_b, label = [t for s in chunk[a_end:] for t in s], IS_NEXT
                owed[0] = max(0, owed[0] - 1)
            cut = _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            if tokens_a and tokens_b:
                examples.append(_pack(tokens_a, tokens_b, label, special))
                if origins is not None:
                    origins.append(Origin(document=index, a_sentences=(start, start + a_end),
                                          b_document=b_document, b_sentences=b_sentences, cut=cut))
            chunk, length = [], 0
            target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        i += 1
    return examples


def _random_segment(sentences: Document, target: int, rng: random.Random) -> tuple[list[int], tuple[int, int]]:
    """Consecutive sentences of a document, starting anywhere, about `target` tokens long, and which sentences they
    are ([start, end))."""
    tokens: list[int] = []
    start = end = rng.randrange(len(sentences))
    for sentence in sentences[start:]:
        tokens.extend(sentence)
        end += 1
        if len(tokens) >= max(target, 1):
            break
    return tokens, (start, end)


def _truncate_pair(tokens_a: list[int], tokens_b: list[int], max_tokens: int, rng: random.Random
                   ) -> tuple[int, int, int, int]:
    """Trim the longer segment, one token at a time from its front or back at random, until the pair fits; how many
    were cut from A's front, A's back, B's front and B's back."""
    cut = [0, 0, 0, 0]
    while len(tokens_a) + len(tokens_b) > max_tokens:
        in_b = len(tokens_a) <= len(tokens_b)
        front = rng.random() < 0.5
        del (tokens_b if in_b else tokens_a)[0 if front else -1]
        cut[2 * in_b + (not front)] += 1
    return cut[0], cut[1], cut[2], cut[3]


def _pack(tokens_a: list[int], tokens_b: list[int], label: int, special: SpecialIds) -> Example:
    ids = array("i", [special.cls, *tokens_a, special.sep, *tokens_b, special.sep])
    segments = array("b", [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1))
    return Example(input_ids=ids, token_type_ids=segments, nsp_label=label)


class PretrainingData:
    """An endless stream of masked batches: examples re-paired every epoch, masks redrawn every batch.

    The stream is cut into shards, one for each process that builds batches (`shards` of them: every torchrun rank
    times its data workers). Each epoch, shard s makes its examples from its own share of the documents, a share
    drawn afresh from the epoch's shuffle, so a shard's work (and its pause at an epoch's end) is 1/shards of the
    corpus's, and the shards' batches together read every document once an epoch. A corpus too small to share out
    (fewer than `MIN_SHARD_DOCUMENTS` documents a shard) is read whole by every shard, each taking every shards-th
    example. Given each document's source (`sources`), a random B comes from another document of A's source in the
    shard's share (`RandomB`); else from any other document, as in the paper.
    """

    def __init__(self, documents: Sequence[Document], special: SpecialIds, max_seq_len: int = 128,
                 batch_size: int = 32, max_predictions: int = 20, seed: int = 0, short_seq_prob: float = 0.1,
                 rank: int = 0, world_size: int = 1, sources: Sequence[int] | None = None,
                 first_rate: float | None = None, steps: int | None = None, first_step: int = 0,
                 **masking: float):
        if len(documents) < 2:
            raise ValueError("the corpus has fewer than two usable documents: next-sentence prediction needs more")
        if sources is not None and len(sources) != len(documents):
            raise ValueError(f"{len(sources)} sources for {len(documents)} documents")
        self.documents, self.sources, self.max_seq_len, self.batch_size = documents, sources, max_seq_len, batch_size
        self.seed, self.short_seq_prob, self.rank, self.world_size = seed, short_seq_prob, rank, world_size
        self.special = special
        self.collate = MaskingCollator(special, max_predictions, **masking)
        self.first_rate, self.steps, self.first_step = first_rate, steps, first_step  # the masking schedule

    def rate(self, step: int) -> float:
        """The share of positions picked in the batches of training step `step` (`masking.masking_rate`): from
        `first_rate` at step 0 to the collator's own at `steps`."""
        progress = step / self.steps if self.steps else 1.0
        return masking_rate(progress, self.collate.mask_prob, self.first_rate)

    def batches(self, workers: int = 0, pin_memory: bool = False) -> Iterator[dict[str, Tensor]]:
        """This rank's batches forever. With `workers`, that many processes build them ahead of the training step
        (a DataLoader, its batches taken from the workers in turn, so the stream is the same on every run), in page-
        locked memory if `pin_memory` (a GPU then copies them while it computes)."""
        if workers == 0:
            return self.shard_batches(self.rank, self.world_size)
        loader = DataLoader(_Shards(self, workers), batch_size=None, num_workers=workers, pin_memory=pin_memory,
                            prefetch_factor=4)
        return iter(loader)

    def shard_batches(self, shard: int, shards: int) -> Iterator[dict[str, Tensor]]:
        """Shard `shard` of `shards`: each epoch, examples from its share of the documents, then their batches."""
        return (batch for batch, _ in self.drawn(shard, shards))

    def drawn(self, shard: int = 0, shards: int = 1, explain: bool = False
              ) -> Iterator[tuple[dict[str, Tensor], list[Origin]]]:
        """`shard_batches`' batches, each with its examples' origins (indices into `documents`) where `explain`, and
        then with each position's fate too ("mlm_fates"); the same batches either way."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + shard)
        per_rank = max(shards // self.world_size, 1)  # this rank's shards take turns: its n-th batch is step n*per_rank
        step = self.first_step + shard % per_rank
        for epoch in itertools.count():
            share, stride = self._share(epoch, shard, shards)
            documents = [self.documents[i] for i in share] if share is not None else self.documents
            sources = self.sources if share is None or self.sources is None else [self.sources[i] for i in share]
            # sharing one epoch's examples out by stride, every shard must draw the same examples
            rng = random.Random(f"{self.seed}:{epoch}" if stride else f"{self.seed}:{epoch}:{shard}")
            origins: list[Origin] | None = [] if explain else None
            examples = create_examples(documents, self.special, self.max_seq_len, rng, self.short_seq_prob, sources,
                                       origins)
            indices = list(range(len(examples)))[shard::shards] if stride else list(range(len(examples)))
            if len(indices) < self.batch_size:
                indices = indices * (self.batch_size // max(len(indices), 1) + 1)  # a tiny corpus: repeat it
            for start in range(0, len(indices) - self.batch_size + 1, self.batch_size):
                chosen = indices[start:start + self.batch_size]
                batch = self.collate([examples[i] for i in chosen], generator, fates=explain, rate=self.rate(step))
                step += per_rank
                yield batch, [_in_corpus(origins[i], share) for i in chosen] if origins is not None else []

    def _share(self, epoch: int, shard: int, shards: int) -> tuple[list[int] | None, bool]:
        """The indices of the documents shard `shard` reads in `epoch` (None: all of them), and whether it must take
        every shards-th example of them (a corpus too small to share out by documents)."""
        if shards == 1:
            return None, False
        if len(self.documents) < MIN_SHARD_DOCUMENTS * shards:
            return None, True
        order = list(range(len(self.documents)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order[shard::shards], False

    def fixed_batches(self, n: int, seed: int = 0) -> list[dict[str, Tensor]]:
        """The same n batches every time (for validation): examples and masks drawn from `seed`."""
        rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
        examples = create_examples(self.documents, self.special, self.max_seq_len, rng, self.short_seq_prob,
                                   self.sources)
        batches = [examples[i:i + self.batch_size] for i in range(0, len(examples), self.batch_size)][:n]
        return [self.collate(chunk, generator) for chunk in batches]


def _in_corpus(origin: Origin, share: list[int] | None) -> Origin:
    """An origin whose documents are numbered in a shard's share, renumbered as in the whole corpus."""
    if share is None:
        return origin
    return dataclasses.replace(origin, document=share[origin.document], b_document=share[origin.b_document])


class _Shards(IterableDataset):
    """A DataLoader's view of the stream: worker w of a rank's W builds shard rank * W + w of world_size * W."""

    def __init__(self, data: PretrainingData, workers: int):
        self.data, self.workers = data, workers

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        worker = get_worker_info()
        index = worker.id if worker is not None else 0
        return self.data.shard_batches(self.data.rank * self.workers + index, self.data.world_size * self.workers)
