"""Loading corpora: sources combined in order, the JSON and in-memory caches, a user's text file and its error
messages, and linear time on pathological uploads."""
from __future__ import annotations

import json
import shutil
import time

import pytest

from bert_demo.data import corpus, sources
from bert_demo.data.corpus import CACHE_VERSION, load_corpus


def write(path, content: str | bytes):
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def test_sources_combine_in_order(wiki, tmp_path, corpus_cache):
    path = write(tmp_path / "mine.txt", "My first sentence is here. My second one follows.\n")
    mine = [["My first sentence is here.", "My second one follows."]]
    assert load_corpus(f"{path}, wiki", cache_dir=corpus_cache) == mine + wiki
    assert load_corpus(f"wiki,{path}", cache_dir=corpus_cache) == wiki + mine


def test_each_document_knows_the_part_of_the_corpus_it_came_from(wiki, tmp_path, corpus_cache):
    path = write(tmp_path / "mine.txt", "My first sentence is here. My second one follows.\n\nA second document "
                                        "starts here. It has two sentences too.\n")
    source = f"wiki,{path}"
    assert len(corpus.document_sources(source, cache_dir=corpus_cache)) == len(load_corpus(source, corpus_cache))
    assert corpus.document_sources(source, cache_dir=corpus_cache) == [0] * len(wiki) + [1, 1]


def test_news_and_wiki_combine_in_order(news, wiki, corpus_cache):
    assert load_corpus("news,wiki", cache_dir=corpus_cache) == news + wiki


def test_load_corpus_returns_lists_the_caller_may_mutate(wiki, corpus_cache):
    documents = load_corpus("wiki", cache_dir=corpus_cache)
    documents[0].clear()
    documents.pop()
    assert load_corpus("wiki", cache_dir=corpus_cache) == wiki


def test_unknown_source_lists_valid_names():
    for source in ["wikipedia", "", "wiki,,news"]:
        with pytest.raises(ValueError, match="unknown corpus .*wiki, news, sotu"):
            load_corpus(source)


PATHOLOGICAL = {  # what a hostile upload may hold, 300,000 characters each
    "one long word": "a" * 300_000,
    "one long run of dots": "." * 300_000,
    "a boundary every 3 characters": ". A" * 100_000,
    "quotes after dots": '."' * 150_000,
    "openers": "([" * 150_000,
    "abbreviations": "Dr. " * 75_000,
    "blank lines": "\n \n" * 100_000,
    "a word then a long gap": "a." + " " * 300_000 + "B",
}


@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_reading_an_upload_takes_linear_time_on_pathological_text(name, tmp_path):
    path = tmp_path / "upload.txt"
    path.write_text(PATHOLOGICAL[name] + "\n\nThe cat sat on the mat. The dog sat on the rug.\n")
    started = time.perf_counter()
    load_corpus(str(path))
    assert time.perf_counter() - started < 5.0  # about 0.1 s; the old regex took 19 s for 40,000 characters


# ---------------------------------------------------------------------------------------------------------------
# caching


def test_parsed_corpus_is_cached_as_json(wiki, corpus_cache, private_cache):
    cached = corpus_cache / f"wiki-v{CACHE_VERSION}.json"
    assert json.loads(cached.read_text(encoding="utf-8")) == wiki
    assert not list(corpus_cache.glob("*.tmp"))  # written atomically, nothing left behind
    # a fresh process (here: a fresh cache directory) reads the JSON instead of parsing again
    private_cache.mkdir()
    json_only = [["This sentence comes from the JSON cache.", "So does this one."]]
    (private_cache / cached.name).write_text(json.dumps(json_only), encoding="utf-8")
    assert load_corpus("wiki") == json_only


def test_repeated_loads_are_served_from_memory(private_cache, monkeypatch):
    calls = []

    def parse(cache):
        calls.append(cache)
        return [["A parsed sentence is here.", "Another parsed sentence."]]

    monkeypatch.setitem(sources.SOURCES, "wiki", sources.Source(parse, "test"))
    first = load_corpus("wiki")
    shutil.rmtree(private_cache)  # without its JSON file, only the in-process cache can answer
    assert load_corpus("wiki") == first and len(calls) == 1


def test_damaged_json_cache_is_parsed_again(private_cache, monkeypatch):
    parse = lambda cache: [["Parsed again from scratch.", "Second one."]]  # noqa: E731
    monkeypatch.setitem(sources.SOURCES, "wiki", sources.Source(parse, "test"))
    private_cache.mkdir()
    (private_cache / f"wiki-v{CACHE_VERSION}.json").write_text('[["half a fi', encoding="utf-8")
    assert load_corpus("wiki") == [["Parsed again from scratch.", "Second one."]]
    assert json.loads((private_cache / f"wiki-v{CACHE_VERSION}.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------------------
# a user's text file


def test_user_file_documents_are_separated_by_blank_lines(tmp_path):
    text = ("\ufeffThe first document starts here. It is wrapped\r\nacross two lines.\r\n\r\n"
            "The second document has one sentence.\n   \n\n"
            "Third document, first sentence. Third document, second sentence!\n")
    assert load_corpus(str(write(tmp_path / "docs.txt", text))) == [
        ["The first document starts here.", "It is wrapped across two lines."],
        ["The second document has one sentence."],
        ["Third document, first sentence.", "Third document, second sentence!"],
    ]


def test_single_line_file_with_two_sentences_is_enough(tmp_path):
    path = write(tmp_path / "one line, with a comma.txt", "The cat sat down. The dog stood up.")
    assert load_corpus(path) == [["The cat sat down.", "The dog stood up."]]


def test_user_file_is_read_again_when_it_changes(tmp_path):
    path = write(tmp_path / "changing.txt", "Version one of the file. It has two sentences.")
    assert load_corpus(str(path))[0][0] == "Version one of the file."
    write(path, "Version two is longer now. It still has two sentences.")
    assert load_corpus(str(path))[0][0] == "Version two is longer now."


@pytest.mark.parametrize("content, message", [
    ("", "fewer than two usable sentences"),
    ("\n\n  \n", "fewer than two usable sentences"),
    ("Just one sentence here.", "fewer than two usable sentences"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
    ("Café au lait. Crème brûlée.".encode("latin-1"), "not UTF-8"),
])
def test_bad_user_files_raise_clear_value_errors(tmp_path, content, message):
    with pytest.raises(ValueError, match=message):
        load_corpus(str(write(tmp_path / "bad.txt", content)))


def test_missing_directory_and_oversized_files_raise_clear_value_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no such file"):
        load_corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="not a file"):
        load_corpus(str(tmp_path))
    monkeypatch.setattr(corpus, "MAX_FILE_BYTES", 1024)
    with pytest.raises(ValueError, match="limit is"):
        load_corpus(str(write(tmp_path / "big.txt", "A long sentence is here. " * 100)))
