"""Conversation between people: "chitchat", the open-domain text chats of BYU's Chit-Chat Challenge (2018), from
the chitchat-dataset wheel on PyPI, a conversation per document, its turns in order; and "multiwoz", what people and
clerks said to each other in MultiWOZ's booking dialogues (restaurants, hotels, taxis, trains, sights), as ConvLab-3
keeps them for its template generator, an utterance per document.

Chat is written fast: a thought is sent as several short messages, often without capitals or a full stop, and a lone
"?" can follow the message it ends. So each message becomes a sentence (its first letter raised, a full stop added
where it has no final punctuation, a lone punctuation message joined to the one before), and messages with links,
emoticons or too few letters are cleaned or dropped; the words themselves, typos and slang included, are kept.
"""
from __future__ import annotations

import json
import re
import unicodedata
import zipfile
from pathlib import Path

from bert_demo.data.parsers.packages import Package, fetch
from bert_demo.data.parsers.prose import tidy
from bert_demo.data.sentences import CLOSERS, to_documents

CHITCHAT = Package("pypi", "chitchat-dataset==0.9.0", "chitchat_dataset-0.9.0-py3-none-any.whl",
                   "7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e")
CONVLAB = Package("pypi-sdist", "convlab==3.0.1", "convlab-3.0.1-py3.8.egg",
                  "8113fadc0a04553b12a5bb8b665c4c4b0f4ce6da723fcff367524cd7a13b4585")
_CHITCHAT_FILE = "chitchat_dataset/dataset.json"
_MULTIWOZ_FILES = ("convlab/nlg/template/multiwoz/auto_user_template_nlg.json",
                   "convlab/nlg/template/multiwoz/auto_system_template_nlg.json")
_SLOT = re.compile(r"#[A-Z]+-[A-Z]+-[A-Z]+#")  # "#RESTAURANT-INFORM-PEOPLE#": a value taken out of the utterance
_CLITIC = re.compile(r"\s+(n't|'\s?(?:m|s|re|ve|ll|d))\b", re.IGNORECASE)  # "I ' m", "do n't", "ca n't"
_PUNCTUATION_ONLY = re.compile(r"[.!?…]+")
_LINK = re.compile(r"https?://|www\.|\.com\b|@\w")
_EMOTICON = re.compile(r"(?<!\w)(?:[:;=xX8][-'^]?[()\[\]DPpOo3/\\|*]+|<3+|\^_?\^|[(][:;][)]|T_T)(?!\w)")
_LONE_I = re.compile(r"\bi\b")
MIN_LETTER_SHARE = 0.6  # of a message's characters other than spaces: less is a number, a code or a face


def _without_symbols(text: str) -> str:
    """Emoji and other pictographs removed (Unicode's "Symbol, other" category)."""
    return "".join(c for c in text if unicodedata.category(c) != "So")


def chat_sentence(message: str) -> str | None:
    """A message as a sentence: emoticons and emoji removed, "i" as "I", the first letter a capital, a full stop
    added where no . ! ? or ellipsis ends it; None for a message with a link or with too few letters."""
    text = tidy(_EMOTICON.sub(" ", _without_symbols(message)))
    if not text or _LINK.search(text):
        return None
    letters = sum(c.isalpha() for c in text)
    if letters < MIN_LETTER_SHARE * len(text.replace(" ", "")):
        return None
    text = _LONE_I.sub("I", text)
    text = text[0].upper() + text[1:]
    return text if text.rstrip(CLOSERS).endswith((".", "!", "?", "…")) else text + "."


def chat_turn(messages: list[str]) -> str:
    """One speaker's run of messages as a paragraph of sentences; a message of punctuation alone ("?") ends the
    one before it."""
    joined: list[str] = []
    for message in messages:
        message = message.strip()
        if _PUNCTUATION_ONLY.fullmatch(message):
            if joined:
                joined[-1] = joined[-1].rstrip() + message
        elif message:
            joined.append(message)
    return " ".join(s for s in map(chat_sentence, joined) if s)


def parse_chitchat(cache: Path) -> list[list[str]]:
    """Each of the 7,168 conversations is a document: its turns in order, each a paragraph of its messages as
    sentences (the prompt the pair was given and the ratings are not read)."""
    wheel = zipfile.ZipFile(fetch(CHITCHAT, cache))
    conversations = json.loads(wheel.read(_CHITCHAT_FILE))
    documents = []
    for conversation in conversations.values():
        turns = [[m.get("text", "") for m in turn if isinstance(m, dict) and isinstance(m.get("text"), str)]
                 for turn in conversation.get("messages", [])]
        documents.append([chat_turn(messages) for messages in turns])
    return to_documents(documents, complete_only=True)


def untokenized(utterance: str) -> str:
    """A tokenised utterance written as people write: "I ' m sure it is n't , thanks ." -> "I'm sure it isn't,
    thanks."."""
    return tidy(_CLITIC.sub(lambda m: m.group(1).replace(" ", ""), utterance))


def _utterances(value: object) -> list[str]:
    """The strings of the template file's {dialogue act: {slots: [utterance, ...]}} mapping, in order."""
    if isinstance(value, dict):
        return [u for v in value.values() for u in _utterances(v)]
    if isinstance(value, list):
        return [u for u in value if isinstance(u, str)]
    return []


def parse_multiwoz(cache: Path) -> list[list[str]]:
    """Each distinct utterance of MultiWOZ's users and clerks is a document (the template files group them by dialogue
    act, not by dialogue); utterances whose values were replaced by slot names are left out, the rest untokenised."""
    egg = zipfile.ZipFile(fetch(CONVLAB, cache))
    utterances = [u for name in _MULTIWOZ_FILES for u in _utterances(json.loads(egg.read(name)))]
    sentences = (chat_sentence(untokenized(u)) for u in dict.fromkeys(utterances) if not _SLOT.search(u))
    return to_documents(([s] for s in sentences if s), complete_only=True)
