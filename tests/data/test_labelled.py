"""bert_demo/data/labelled.py: the offline movie-review sentences and their outside domains as fixed splits, GLUE's
columns mapped onto ours, a visitor's labelled file checked with a clear message for each fault, and the metrics."""
from __future__ import annotations

import json

import datasets
import pytest

from bert_demo.data import labelled
from bert_demo.data.labelled import first, from_glue, load_file, load_task, score


@pytest.fixture(scope="module")
def reviews() -> datasets.DatasetDict:
    return load_task("movie-reviews")


def test_the_movie_reviews_come_as_fixed_train_validation_and_test_splits_of_rated_sentences(reviews):
    assert {name: len(split) for name, split in reviews.items()} == {"train": 8454, "validation": 1057, "test": 1057}
    assert reviews["train"].features["label"].names == ["negative", "positive"]
    counts = [list(reviews["test"]["label"]).count(c) for c in (0, 1)]
    assert min(counts) > 450  # both classes, about half each
    again = load_task("movie-reviews")
    assert again["train"][:5] == reviews["train"][:5] and again["test"][-3:] == reviews["test"][-3:]
    texts = [text for split in reviews.values() for text in split["text"]]
    assert len(set(texts)) > 0.99 * len(texts) and all(t.strip() for t in texts)


def test_the_other_domains_come_from_the_same_archive_with_the_same_classes():
    for name in ("amazon-reviews", "nyt-editorials", "tweets"):
        task = load_task(name)
        assert task["test"].features["label"].names == ["negative", "positive"] and len(task["test"]) > 300


def test_the_first_n_labels_are_exactly_the_first_n_of_the_fixed_shuffle(reviews):
    assert list(first(reviews["train"], 100)["text"]) == list(reviews["train"]["text"])[:100]
    assert first(reviews["train"], None) is reviews["train"] and len(first(reviews["train"], 10**9)) == 8454
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="must be a positive whole number"):
            first(reviews["train"], bad)


def test_glue_columns_become_text_text_b_and_label():
    pairs = datasets.DatasetDict({split: datasets.Dataset.from_dict(
        {"sentence1": ["a cat sat.", "it rained."], "sentence2": ["a cat was sitting.", "the sun shone."],
         "label": [1, 0], "idx": [0, 1]}) for split in ("train", "validation", "test")})
    ours = from_glue(pairs)
    assert set(ours["train"].column_names) == {"label", "text", "text_b"}
    assert ours["validation"][0] == {"label": 1, "text": "a cat sat.", "text_b": "a cat was sitting."}
    single = datasets.DatasetDict({split: datasets.Dataset.from_dict({"sentence": ["good."], "label": [1]})
                                   for split in ("train", "validation")})
    assert from_glue(single)["test"][0] == {"label": 1, "text": "good.", "text_b": None}


def test_a_glue_task_offline_fails_with_the_message_the_corpora_give(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("no route to the hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr("bert_demo.data.labelled.hub_reachable", lambda: True)  # the client's own refusal
    with pytest.raises(ValueError, match="could not load GLUE sst2: the Hugging Face Hub is not reachable from here "
                                         "\\(ConnectionError\\). Use movie-reviews, which works offline"):
        load_task("sst2")
    monkeypatch.setattr("bert_demo.data.labelled.hub_reachable", lambda: False)  # no answer: the client never asked
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: pytest.fail("the hub was asked"))
    with pytest.raises(ValueError, match="could not load GLUE sst2: the Hugging Face Hub is not reachable from here. "
                                         "Use movie-reviews"):
        load_task("sst2")
    with pytest.raises(ValueError, match="unknown task 'imdb': choose from movie-reviews"):
        load_task("imdb")


def test_a_visitors_csv_tsv_or_jsonl_file_becomes_a_task_with_its_own_classes(tmp_path):
    rows = [{"text": f"sentence number {i}.", "text_b": f"and its pair {i}.", "label": ["no", "yes", "maybe"][i % 3]}
            for i in range(30)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    (tmp_path / "a.csv").write_text("text,text_b,label\n" + "\n".join(f"{r['text']},{r['text_b']},{r['label']}"
                                                                      for r in rows))
    (tmp_path / "a.tsv").write_text("text\tlabel\n" + "\n".join(f"{r['text']}\t{r['label']}" for r in rows))
    for name in ("a.jsonl", "a.csv", "a.tsv"):
        task = load_file(tmp_path / name)
        assert task["train"].features["label"].names == ["maybe", "no", "yes"]
        assert sum(len(split) for split in task.values()) == 30
    assert load_file(tmp_path / "a.csv")["train"][0]["text_b"].startswith("and its pair")
    assert load_file(tmp_path / "a.tsv")["train"][0]["text_b"] is None


@pytest.mark.parametrize("name, content, message", [
    ("x.csv", "text,rating\na,1\nb,2\n", "has no 'label' column: it needs text, label and optionally text_b"),
    ("x.csv", "text,label\na,good\nb,good\n", "every example has the label 'good': a classifier needs at least two"),
    ("x.csv", "text,label\n" + "".join(f"t{i},c{i}\n" for i in range(21)), "has 21 classes; at most 20"),
    ("x.csv", "text,label\n ,good\nb,bad\n", "example 1 has no text"),
    ("x.csv", "text,label\na,\nb,bad\n", "example 1 has no label"),
    ("x.csv", b"text,label\n\xff\xfe,good\n", "is not UTF-8 text"),
    ("x.csv", "", "has no examples"),
    ("x.jsonl", "[1, 2]\n", "line 1 of the labelled file is not a JSON object"),
    ("x.jsonl", "{not json\n", "line 1 of the labelled file is not JSON"),
    ("x.xlsx", "text,label\n", "give a .csv, .tsv or .jsonl file, not .xlsx"),
    ("x.csv", "text,label\n" + "a" * 2001 + ",good\nb,bad\n", "example 1 has a text over 2000 characters"),
    ("x.csv", "text,label\n" + "a,good\nb,bad\n" * 3, "has 6 examples; at least 20 are needed"),
    ("x.csv", "text,text_b,label\n" + "a,b,good\nc,,bad\n" * 10, "example 2 differs from the first"),
    ("x.csv", "text,label\n" + "a,good\n" * 10 + f"b,{'x' * 101}\n" * 10, "a class name has 101 characters"),
    # a field over csv's 128 KB limit: was csv.Error, "Something went wrong" and a traceback
    ("x.csv", "text,label\na,good\n" + "b" * 140_000 + ",bad\n", "example 2 has a text over 2000 characters"),
    ("x.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", "line 1 of the labelled file is nested too deeply"),
    ("x.jsonl", '{"text": "a", "label": ' + "7" * 5000 + "}\n", "line 1 of the labelled file has a number too long"),
])
def test_a_labelled_file_that_cannot_be_trained_on_is_refused_with_what_is_wrong(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=message):
        load_file(path)


def test_a_labelled_file_over_the_size_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(labelled, "MAX_FILE_BYTES", 100)
    (tmp_path / "big.csv").write_text("text,label\n" + "a sentence,good\n" * 20)
    with pytest.raises(ValueError, match="at most 0 MB are allowed"):
        load_file(tmp_path / "big.csv")


def test_accuracy_f1_and_matthews_correlation_match_their_hand_computed_values():
    predictions, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # tp 2, fp 1, fn 1, tn 1
    assert score("accuracy", predictions, labels) == pytest.approx(3 / 5)
    assert score("f1", predictions, labels) == pytest.approx(2 / 3)
    assert score("matthews", predictions, labels) == pytest.approx(1 / 6)
    assert score("matthews", [1, 1], [1, 1]) == 0.0  # undefined: reported as 0, as GLUE does
    with pytest.raises(ValueError, match="unknown metric 'auc'"):
        score("auc", [1], [1])
