"""Pre-training examples follow BERT's recipe: statistics over many examples, checked against the paper's numbers."""
from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch

from bert_demo.data.pairs import (
    PretrainingData,
    SpecialIds,
    create_examples,
    held_out,
    partition,
    split_documents,
    token_counts,
    tokenize_documents,
    tokenize_sourced,
)
from bert_demo.config import IS_NEXT, NOT_NEXT
from bert_demo.model import IGNORE_INDEX

SPECIAL = SpecialIds(cls=2, sep=3, mask=4, pad=0, vocab_size=6000, special=(0, 1, 2, 3, 4))
DOC_SPAN = 250  # document d owns token ids [5 + d * DOC_SPAN, 5 + (d + 1) * DOC_SPAN), in reading order


def numbered_documents(n_docs: int = 20, seed: int = 0) -> list[list[list[int]]]:
    """Documents whose token ids say where they came from: the document, and the order within it."""
    rng = random.Random(seed)
    documents = []
    for d in range(n_docs):
        next_id, sentences = 5 + d * DOC_SPAN, []
        while next_id + 25 < 5 + (d + 1) * DOC_SPAN:
            length = rng.randint(4, 24)
            sentences.append(list(range(next_id, next_id + length)))
            next_id += length
        documents.append(sentences)
    return documents


def document_of(token: int) -> int:
    return (token - 5) // DOC_SPAN


def segments(example) -> tuple[list[int], list[int]]:
    ids = list(example.input_ids)
    first_sep = ids.index(SPECIAL.sep)
    return ids[1:first_sep], ids[first_sep + 1:-1]


def many_batches(n: int = 60, **kwargs) -> list[dict[str, torch.Tensor]]:
    data = PretrainingData(numbered_documents(), SPECIAL, max_seq_len=64, batch_size=32,
                           **{"max_predictions": 20, **kwargs})
    stream = data.batches()
    return [next(stream) for _ in range(n)]


def test_examples_are_cls_a_sep_b_sep_within_the_length_limit():
    examples = create_examples(numbered_documents(), SPECIAL, 64, random.Random(0))
    assert len(examples) > 50
    for example in examples:
        a, b = segments(example)
        assert list(example.input_ids) == [SPECIAL.cls, *a, SPECIAL.sep, *b, SPECIAL.sep]
        assert a and b and len(example.input_ids) <= 64
        assert list(example.token_type_ids) == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def test_true_next_segments_continue_a_and_random_ones_come_from_another_document():
    examples = create_examples(numbered_documents(), SPECIAL, 64, random.Random(1))
    for example in examples:
        a, b = segments(example)
        docs_a, docs_b = {document_of(t) for t in a}, {document_of(t) for t in b}
        assert len(docs_a) == 1 and len(docs_b) == 1
        if example.nsp_label == IS_NEXT:
            assert docs_a == docs_b and max(a) < min(b)
        else:
            assert docs_a != docs_b


SOURCES = [0] * 10 + [1] * 6 + [2] * 3 + [3]  # a mix of four sources of 10, 6, 3 and 1 documents


def random_pairs(sources: list[int] | None, passes: int = 300) -> list[tuple[int, int]]:
    """(A's document, B's document) of every random pair in `passes` passes over numbered_documents(), each random B
    drawn from A's source (given `sources`) or from any other document (the paper's draw)."""
    documents, pairs = numbered_documents(len(SOURCES)), []
    for seed in range(passes):
        for example in create_examples(documents, SPECIAL, 64, random.Random(seed), sources=sources):
            if example.nsp_label == NOT_NEXT:
                a, b = segments(example)
                pairs.append((document_of(a[0]), document_of(b[0])))
    return pairs


def shares(counts: Counter) -> dict:
    total = sum(counts.values())
    return {key: n / total for key, n in sorted(counts.items())}


def test_with_the_same_source_draw_every_random_b_comes_from_another_document_of_as_source_any_one_alike():
    pairs = [(a, b) for a, b in random_pairs(SOURCES) if SOURCES[a] != 3]
    assert len(pairs) > 12_000
    assert all(b != a and SOURCES[b] == SOURCES[a] for a, b in pairs)
    # each of A's peers alike: B's place among the other 9 documents of source 0 is uniform
    places = Counter([d for d in range(10) if d != a].index(b) for a, b in pairs if SOURCES[a] == 0)
    assert shares(places) == pytest.approx({place: 1 / 9 for place in range(9)}, abs=0.015)


def test_with_the_same_source_draw_a_document_alone_in_its_source_takes_b_from_any_other_in_proportion():
    from_alone = [b for a, b in random_pairs(SOURCES) if SOURCES[a] == 3]  # document 19, its source's only one
    assert len(from_alone) > 600 and 19 not in from_alone
    assert shares(Counter(SOURCES[b] for b in from_alone)) == pytest.approx({0: 10 / 19, 1: 6 / 19, 2: 3 / 19},
                                                                           abs=0.05)


def test_with_the_papers_draw_random_b_comes_from_every_other_document_so_from_each_source_in_proportion():
    pairs = random_pairs(None)
    assert all(b != a for a, b in pairs)
    from_source_0 = Counter(SOURCES[b] for a, b in pairs if SOURCES[a] == 0)  # 19 other documents: 9 of its own
    assert sum(from_source_0.values()) > 6000
    assert shares(from_source_0) == pytest.approx({0: 9 / 19, 1: 6 / 19, 2: 3 / 19, 3: 1 / 19}, abs=0.02)


def test_each_shard_keeps_its_documents_sources_so_its_random_b_stays_within_the_source():
    documents = numbered_documents(40)
    sources = [d % 3 for d in range(40)]
    data = PretrainingData(documents, SPECIAL, max_seq_len=64, batch_size=4, sources=sources)
    random_b = 0
    for batch in itertools.islice(data.shard_batches(1, 2), 60):  # shard 1 of 2: half the documents, shuffled
        for row, label in zip(unmasked(batch), batch["nsp_labels"].tolist()):
            first_sep = row.tolist().index(SPECIAL.sep)
            a, b = document_of(int(row[1])), document_of(int(row[first_sep + 1]))
            random_b += label == NOT_NEXT
            assert label == IS_NEXT or (b != a and sources[b] == sources[a])
    assert random_b > 60


def test_documents_and_their_sources_are_held_out_alike_and_in_order():
    documents = [[f"document {d} sentence {s}." for s in range(3)] for d in range(400)]
    sources = [d % 7 for d in range(400)]
    held = held_out(documents, 0.1, seed=0)
    (train, val), (train_sources, val_sources) = partition(documents, held), partition(sources, held)
    assert (train, val) == split_documents(documents, 0.1, seed=0) and len(val) == sum(held)
    numbers = [int(document[0].split()[1]) for document in val]
    assert numbers == sorted(numbers) and [n % 7 for n in numbers] == val_sources
    assert [int(document[0].split()[1]) % 7 for document in train] == train_sources


def test_next_sentence_labels_are_balanced():
    labels = torch.cat([b["nsp_labels"] for b in many_batches()])
    assert labels.float().mean().item() == pytest.approx(0.5, abs=0.04)
    assert set(labels.tolist()) == {IS_NEXT, NOT_NEXT}


def test_about_ten_percent_of_examples_are_shorter_targets():
    examples = create_examples(numbered_documents(60), SPECIAL, 128, random.Random(2))
    short = sum(len(e.input_ids) < 64 for e in examples) / len(examples)
    assert 0.03 < short < 0.3  # short_seq_prob 0.1 plus documents' natural ends


def test_masking_rate_and_80_10_10_split_match_the_paper_within_one_point():
    batches = many_batches(n=150)
    chosen = kept = masked = random_ = candidates = 0
    for batch in batches:
        labels, ids = batch["mlm_labels"], batch["input_ids"]
        targets = labels != IGNORE_INDEX
        candidates += batch["attention_mask"].sum().item() - 3 * len(ids)  # [CLS] and two [SEP] per row
        chosen += targets.sum().item()
        masked += (ids[targets] == SPECIAL.mask).sum().item()
        kept += (ids[targets] == labels[targets]).sum().item()
        random_ += ((ids[targets] != SPECIAL.mask) & (ids[targets] != labels[targets])).sum().item()
    assert chosen / candidates == pytest.approx(0.15, abs=0.01)
    assert masked / chosen == pytest.approx(0.8, abs=0.01)
    assert random_ / chosen == pytest.approx(0.1, abs=0.01)
    assert kept / chosen == pytest.approx(0.1, abs=0.01)


def test_special_tokens_and_padding_are_never_targets_and_random_tokens_are_never_special():
    for batch in many_batches():
        labels, ids = batch["mlm_labels"], batch["input_ids"]
        targets = labels != IGNORE_INDEX
        assert not torch.isin(labels[targets], torch.tensor(SPECIAL.special)).any()
        replaced = targets & (ids != SPECIAL.mask)
        assert not torch.isin(ids[replaced], torch.tensor(SPECIAL.special)).any()
        assert (targets.sum(1) <= 20).all() and (targets.sum(1) >= 1).all()


def test_padding_has_no_attention_no_segment_and_no_label():
    for batch in many_batches(n=10):
        pad = batch["attention_mask"] == 0
        assert pad.any()  # short examples make padded rows
        assert (batch["input_ids"][pad] == SPECIAL.pad).all()
        assert (batch["token_type_ids"][pad] == 0).all() and (batch["mlm_labels"][pad] == IGNORE_INDEX).all()
        lengths = batch["attention_mask"].sum(1)
        assert (batch["input_ids"].gather(1, (lengths - 1)[:, None]) == SPECIAL.sep).all()


def test_the_same_examples_get_new_masks_each_time_they_are_drawn_but_fixed_batches_repeat():
    data = PretrainingData(numbered_documents(), SPECIAL, max_seq_len=64, batch_size=8)
    a, b = data.fixed_batches(3, seed=5), data.fixed_batches(3, seed=5)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
    examples = create_examples(numbered_documents(), SPECIAL, 64, random.Random(0))[:8]
    generator = torch.Generator().manual_seed(0)
    first, again = data.collate(examples, generator), data.collate(examples, generator)  # one batch, drawn twice
    assert torch.equal(first["attention_mask"], again["attention_mask"])
    assert not torch.equal(first["mlm_labels"], again["mlm_labels"])  # static masking would repeat the targets


def test_all_mask_evaluation_replaces_every_target_with_mask():
    data = PretrainingData(numbered_documents(), SPECIAL, max_seq_len=64, batch_size=16, replace_mask=1.0,
                           replace_random=0.0)
    for batch in data.fixed_batches(4):
        targets = batch["mlm_labels"] != IGNORE_INDEX
        assert (batch["input_ids"][targets] == SPECIAL.mask).all()


def unmasked(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A batch's token ids as they were before masking."""
    return torch.where(batch["mlm_labels"] != IGNORE_INDEX, batch["mlm_labels"], batch["input_ids"])


def first_documents(batch: dict[str, torch.Tensor]) -> set[int]:
    """The documents the batch's A segments come from (the token after [CLS])."""
    return {document_of(int(token)) for token in unmasked(batch)[:, 1]}


def test_shards_read_disjoint_documents_in_an_epoch_and_every_document_in_turn():
    data = PretrainingData(numbered_documents(40), SPECIAL, max_seq_len=64, batch_size=4)
    epoch = [list(itertools.islice(data.shard_batches(shard, 2), 5)) for shard in range(2)]
    read = [set().union(*map(first_documents, batches)) for batches in epoch]
    assert read[0] and read[1] and not read[0] & read[1]
    later = set().union(*map(first_documents, itertools.islice(data.shard_batches(0, 2), 400)))
    assert later == set(range(40))  # the epochs' shares are drawn afresh: shard 0 reads every document in time


def test_a_corpus_too_small_to_share_out_by_documents_is_shared_out_by_examples():
    documents = numbered_documents(6)  # fewer than MIN_SHARD_DOCUMENTS a shard
    data = PretrainingData(documents, SPECIAL, max_seq_len=64, batch_size=2, short_seq_prob=0.0)
    rows = [unmasked(next(data.shard_batches(shard, 2))) for shard in range(2)]
    whole = create_examples(documents, SPECIAL, 64, random.Random("0:0"), 0.0)
    assert [list(e.input_ids) for e in whole[0:4:2]] == [r[r != SPECIAL.pad].tolist() for r in rows[0]]
    assert [list(e.input_ids) for e in whole[1:4:2]] == [r[r != SPECIAL.pad].tolist() for r in rows[1]]


def test_ranks_take_disjoint_shares_of_each_epoch():
    docs = numbered_documents()
    streams = [PretrainingData(docs, SPECIAL, max_seq_len=64, batch_size=4, rank=r, world_size=2).batches()
               for r in range(2)]
    read = [set().union(*map(first_documents, itertools.islice(s, 3))) for s in streams]
    assert read[0] and read[1] and not read[0] & read[1]


def test_workers_build_the_same_stream_as_their_shards_taken_in_turn():
    data = PretrainingData(numbered_documents(40), SPECIAL, max_seq_len=64, batch_size=4, rank=1, world_size=2)
    with_workers = list(itertools.islice(data.batches(workers=2), 6))
    shards = [data.shard_batches(2, 4), data.shard_batches(3, 4)]  # rank 1's workers build shards 2 and 3 of 4
    in_turn = [next(shards[i % 2]) for i in range(6)]
    for got, expected in zip(with_workers, in_turn, strict=True):
        assert all(torch.equal(got[key], expected[key]) for key in expected)


def test_validation_split_holds_out_whole_documents():
    documents = [[f"document {d} sentence {s}." for s in range(3)] for d in range(400)]
    train, val = split_documents(documents, 0.1, seed=0)
    assert 20 <= len(val) <= 60 and len(train) + len(val) == 400
    assert not {s for d in train for s in d} & {s for d in val for s in d}
    _, val_of_half = split_documents(documents[::2], 0.1, seed=0)
    assert val_of_half == [d for d in val if d in documents[::2]]  # held out whatever it is combined with
    assert [len(part) for part in split_documents(documents[:4], 0.1, seed=0)] == [2, 2]
    with pytest.raises(ValueError, match="at least 4 are needed"):
        split_documents(documents[:3], 0.1, seed=0)


def test_tokenize_documents_keeps_document_boundaries_and_drops_empty_sentences(tokenizer):
    docs = tokenize_documents([["the cat sat.", "   "], ["the dog sat.", "paris is big."], [""]], tokenizer)
    assert len(docs) == 2 and [len(d) for d in docs] == [1, 2]
    assert tokenizer.decode(docs[1][0]) == "the dog sat."
    sourced = tokenize_sourced([[""], ["the cat sat."], ["  "], ["the dog sat."]], [4, 5, 6, 7], tokenizer)
    assert sourced.sources == [5, 7] and len(sourced.documents) == 2  # a dropped document's source goes with it


def test_token_counts_count_every_token_of_every_sentence_of_every_document():
    documents = numbered_documents(n_docs=5)
    counts = token_counts(documents, SPECIAL.vocab_size)
    expected = torch.zeros(SPECIAL.vocab_size, dtype=torch.long)
    for token in (t for document in documents for sentence in document for t in sentence):
        expected[token] += 1
    assert counts.shape == (SPECIAL.vocab_size,) and torch.equal(counts, expected) and counts.sum() > 0
    assert token_counts([], 7).tolist() == [0] * 7


def picked_share(batch: dict[str, torch.Tensor]) -> float:
    """The share of a batch's non-special positions that are masked-LM targets."""
    candidates = batch["attention_mask"].sum().item() - 3 * len(batch["input_ids"])  # [CLS] and two [SEP] a row
    return (batch["mlm_labels"] != IGNORE_INDEX).sum().item() / candidates


def test_a_falling_masking_rate_picks_its_share_at_each_step_from_the_first_rate_to_the_last():
    batches = many_batches(n=101, mask_prob=0.15, first_rate=0.45, steps=100, max_predictions=40)
    for step in (0, 50, 100):
        expected = 0.45 + (0.15 - 0.45) * step / 100
        assert picked_share(batches[step]) == pytest.approx(expected, abs=0.015)


def test_a_resumed_streams_masking_rate_continues_from_its_first_step():
    (resumed,) = many_batches(n=1, mask_prob=0.15, first_rate=0.45, steps=100, first_step=50, max_predictions=40)
    assert picked_share(resumed) == pytest.approx(0.30, abs=0.015)


def test_workers_taking_turns_mask_each_step_at_that_steps_rate():
    data = PretrainingData(numbered_documents(40), SPECIAL, max_seq_len=64, batch_size=32, max_predictions=40,
                           mask_prob=0.15, first_rate=0.45, steps=4)
    shares = [picked_share(batch) for batch in itertools.islice(data.batches(workers=2), 5)]
    assert shares == pytest.approx([0.45, 0.375, 0.30, 0.225, 0.15], abs=0.015)


def masked_runs(batch: dict[str, torch.Tensor]) -> Counter:
    """How many runs of consecutive targets of each length the batch holds."""
    runs: Counter = Counter()
    for row in (batch["mlm_labels"] != IGNORE_INDEX).tolist():
        length = 0
        for target in [*row, False]:
            if target:
                length += 1
            elif length:
                runs[length] += 1
                length = 0
    return runs


def test_span_masking_picks_runs_of_one_to_span_tokens_and_the_same_share():
    spans, singles = many_batches(n=40, span=3), many_batches(n=40)
    runs = masked_runs(spans[0]) + sum((masked_runs(b) for b in spans[1:]), Counter())
    assert sum(runs[length] for length in (2, 3)) > runs[1]  # mostly runs (1, 2 and 3 drawn alike)
    assert sum(picked_share(b) for b in spans) == pytest.approx(sum(picked_share(b) for b in singles), rel=0.02)
    single_runs = sum((masked_runs(b) for b in singles), Counter())
    assert single_runs[1] > 3 * sum(n for length, n in single_runs.items() if length > 1)  # single tokens, mostly


def test_span_masking_never_picks_special_tokens_or_padding():
    for batch in many_batches(n=20, span=4):
        targets = batch["mlm_labels"] != IGNORE_INDEX
        assert not torch.isin(batch["mlm_labels"][targets], torch.tensor(SPECIAL.special)).any()
        assert not (targets & (batch["attention_mask"] == 0)).any()
