"""The pre-training example a page shows is the trainer's own: the batch training draws with the same seed, its
origins and fates true to its tokens, the shares of its choices what the recipe says over 1,000 draws, and its loss
the training loop's."""
from __future__ import annotations

import math

import pytest
import torch

from bert_demo.data.masking import FATES
from bert_demo.inspection import pretraining_example
from bert_demo.config import IS_NEXT
from bert_demo.model import IGNORE_INDEX
from bert_demo.training.pretraining import prepare, pretraining, split_corpus
from bert_demo.training.settings import MAX_SEED, PAPER_RECIPE, TrainConfig

SEED = 11


PLACES = ["river", "mountain", "city", "forest", "island", "castle", "harbour", "valley", "bridge", "market"]
DOINGS = ["was first described long ago", "was visited every summer", "became famous across the country",
          "is described in old books", "is still visited by travellers", "was painted by many artists",
          "was nearly forgotten for a century", "appears on the town's oldest map", "gave its name to a street",
          "was the subject of a long dispute", "welcomed a king once", "was rebuilt after a great fire"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Documents of twelve sentences: longer than a pair, so that a random B ends inside its document."""
    documents = [" ".join(f"The {PLACES[d % 10]} number {d} {doing}." for doing in DOINGS) for d in range(40)]
    path = tmp_path_factory.mktemp("corpus") / "places.txt"
    path.write_text("\n\n".join(documents) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def training(corpus, tmp_path_factory):
    """A pre-training run's prepared task at batch size 1 (the fast recipe), and the documents it trains on."""
    config = TrainConfig(corpus=corpus, preset="tiny", vocab_size=256, seq_len=64, batch_size=1, seed=SEED,
                         steps=5, out=str(tmp_path_factory.mktemp("run") / "out"), device="cpu")
    run = pretraining(config)
    steps = prepare(run)
    try:
        while True:
            next(steps)
    except StopIteration as done:
        task = done.value
    (documents, sources), _ = split_corpus(config)
    return config, run, task, pretraining_example.Documents(documents=documents, sources=["places"] * len(documents),
                                                            numbers=list(range(len(documents))),
                                                            firsts=[0] * len(documents))


def test_the_example_is_the_batch_training_draws_first_with_the_same_seed(training):
    config, run, task, documents = training
    first = next(task.batches)
    example = pretraining_example.draw(documents, run.tokenizer, config, SEED)
    assert set(example.batch) == set(first)
    for name, tensor in first.items():
        assert torch.equal(example.batch[name], tensor), name
    other = pretraining_example.draw(documents, run.tokenizer, config, SEED + 1)
    assert not torch.equal(other.batch["input_ids"], first["input_ids"])


def test_the_segments_origins_and_fates_are_those_of_its_tokens(training):
    config, run, _, documents = training
    tokenizer = run.tokenizer
    for seed in range(16):
        example = pretraining_example.draw(documents, tokenizer, config, seed)
        first_sep = example.pieces.index("[SEP]")
        a_pieces, b_pieces = example.pieces[1:first_sep], example.pieces[first_sep + 1:-1]
        cut = example.cut
        a_full = tokenizer.tokenize(" ".join(example.a.sentences))
        b_full = tokenizer.tokenize(" ".join(example.b.sentences))
        assert a_pieces == a_full[cut[0]:len(a_full) - cut[1]]
        assert b_pieces == b_full[cut[2]:len(b_full) - cut[3]]
        assert example.token_type_ids == [0] * (first_sep + 1) + [1] * (len(b_pieces) + 1)
        if example.is_next:
            assert (example.b.document, example.b.first) == (example.a.document,
                                                             example.a.first + len(example.a.sentences))
        else:
            assert example.b.document != example.a.document
        assert example.is_next == (int(example.batch["nsp_labels"][0]) == IS_NEXT)
        for position, (piece, shown, fate, label) in enumerate(zip(example.pieces, example.shown, example.fates,
                                                                   example.labels)):
            assert (label != IGNORE_INDEX) == (fate != 0), position
            if FATES[fate] == "a random word":  # any word of the vocabulary but a special token
                assert shown not in tokenizer.all_special_tokens, position
            else:
                assert shown == ("[MASK]" if FATES[fate] == "[MASK]" else piece), position
            if fate:
                assert tokenizer.convert_ids_to_tokens(label) == piece


@pytest.mark.parametrize("recipe", ["fast", "paper", "mask-share-0.6"])
def test_over_1000_draws_the_shares_of_each_choice_hold_what_the_recipe_says(training, recipe):
    """Within four standard deviations of a binomial count (masking rounds each example's picks to a whole number,
    which moves the picked share by less than 1/200 on these examples)."""
    config, run, _, documents = training
    changes = {"fast": {}, "paper": PAPER_RECIPE, "mask-share-0.6": {"mask_replace": 0.6}}[recipe]
    recipe_config = TrainConfig.from_dict({**config.to_dict(), **changes})
    shares = pretraining_example.shares(documents, run.tokenizer, recipe_config, draws=1000)
    assert shares.draws == 1000 and shares.mask_prob == (0.15 if recipe == "paper" else 0.25)

    def within(share: float, p: float, n: int, slack: float = 0.0) -> bool:
        return abs(share - p) <= 4 * math.sqrt(p * (1 - p) / n) + slack

    assert within(shares.picked, shares.mask_prob, shares.candidates, slack=0.005), shares
    sets = (0.6, 0.2, 0.2) if recipe == "mask-share-0.6" else (0.8, 0.1, 0.1)
    assert shares.mask_replace == sets[0]
    for fate, p in zip(("[MASK]", "a random word", "kept"), sets):
        assert within(shares.fates[fate], p, shares.targets), (fate, shares)
    assert within(shares.is_next, 0.5, shares.draws), shares


def test_the_examples_loss_is_the_training_loops_loss_for_that_batch(training):
    """The masked-LM loss the page shows (the mean of each picked position's cross-entropy) and the NSP loss, summed
    with the recipe's weight, are what the training loop's loss function makes of the same batch."""
    config, run, task, documents = training
    example = pretraining_example.draw(documents, run.tokenizer, config, SEED)
    model = task.model.eval()
    with torch.no_grad():
        out = model(**example.batch, **task.forward_extras(example.batch))
        looped, _ = task.loss(out, example.batch, example.batch)
    shown = pretraining_example.loss(model, example, run.tokenizer, config.nsp_weight)
    assert shown.loss == pytest.approx(float(looped), abs=1e-5)
    assert shown.mlm_loss == pytest.approx(sum(shown.losses) / len(shown.losses), abs=1e-5)
    assert shown.positions == example.picked and len(shown.losses) == len(example.picked)
    for loss, p in zip(shown.losses, shown.target_probs):
        assert loss == pytest.approx(-math.log(p), rel=1e-4)
    label_prob = shown.is_next_prob if example.is_next else 1 - shown.is_next_prob
    assert shown.nsp_loss == pytest.approx(-math.log(label_prob), rel=1e-4)


def test_typed_paragraphs_and_seeds_are_checked_with_clear_messages():
    with pytest.raises(ValueError, match="at least two paragraphs"):
        pretraining_example.typed_documents("One paragraph only. It has two sentences.")
    with pytest.raises(ValueError, match="type a few paragraphs"):
        pretraining_example.typed_documents("   ")
    with pytest.raises(ValueError, match="at most"):
        pretraining_example.typed_documents("Word. " * 2000)
    for seed in (-1, MAX_SEED + 1, 1.5, "7", True):
        with pytest.raises(ValueError, match="seed must be a whole number"):
            pretraining_example.check_seed(seed)
    assert pretraining_example.check_seed(7.0) == 7 and pretraining_example.check_seed(MAX_SEED) == MAX_SEED


def test_a_runs_held_out_sample_is_from_its_validation_split_and_a_visitors_file_has_none(tmp_path):
    from bert_demo.inspection.pretraining_example import held_out_sample

    recipe = TrainConfig(corpus="wiki", val_fraction=0.05, seed=3)
    sample = held_out_sample(recipe, count=5, length=4)
    (train, _), (held, _) = split_corpus(recipe)
    assert len(sample.documents) == 5 and all(len(d) <= 4 for d in sample.documents)
    assert sample.documents == [d[:4] for d in held[:5]]
    starts = {tuple(d[:4]) for d in train}
    assert not any(tuple(d) in starts for d in sample.documents)  # none is a training document's opening
    assert all(source.endswith(", held out") for source in sample.sources)
    corpus = tmp_path / "mine.txt"
    corpus.write_text("One sentence here.\n\nAnother one there.")
    assert held_out_sample(TrainConfig(corpus=str(corpus))) is None
