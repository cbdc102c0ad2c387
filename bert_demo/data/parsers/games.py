"""Text of free games in Debian: descriptions, dialogue, story and help from their data files (never their code,
maps or markup): "cataclysm", "endless-sky", "crawl", "wesnoth" and "crossfire".

Game text repeats itself (one description copied to every variant of an item, stock lines in many dialogues) and
holds placeholders filled in at play time, so every source goes through `_SentenceFilter`: each sentence is kept
once, and sentences with placeholders or code-like characters are dropped.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bert_demo.data.parsers.packages import deb_files, debian, fetch, file_text
from bert_demo.data.parsers.prose import tidy
from bert_demo.data.sentences import paragraphs, to_documents

CATACLYSM = debian("cataclysm-dda-data=0.F-3-9", "pool/main/c/cataclysm-dda/cataclysm-dda-data_0.F-3-9_all.deb",
                   "cd0c097169fe364fdb6bcdab77663d24920a063387ce2fbf1b5d3be01c141105")
ENDLESS_SKY = debian("endless-sky-data=0.9.8-1.2", "pool/main/e/endless-sky/endless-sky-data_0.9.8-1.2_all.deb",
                     "e45835e05a11e84bb1a890a0ded390246a53b8318f21a25925aa70fa54f80c13")
CRAWL = debian("crawl-common=2:0.28.0-1.1", "pool/main/c/crawl/crawl-common_0.28.0-1.1_all.deb",
               "50c8f0091ba88538dde6585e5eddba02677bfe94d3ee4dc90a5bd3a788650f59")
CROSSFIRE = debian("crossfire-common=1.75.0-5", "pool/main/c/crossfire/crossfire-common_1.75.0-5_all.deb",
                   "076043330673518c1492a4c4eb57128fb9f098bab853aaf04ac6641b6a24d3c8")
CROSSFIRE_MAPS = debian("crossfire-maps=1.75.0+dfsg1-1",
                        "pool/main/c/crossfire-maps/crossfire-maps_1.75.0+dfsg1-1_all.deb",
                        "536fff25086f74fd067a21004f87bab5aed3c946091038a83ec240333bb74535")
WESNOTH = debian("wesnoth-1.16-data=1:1.16.9-1", "pool/main/w/wesnoth-1.16/wesnoth-1.16-data_1.16.9-1_all.deb",
                 "1012b964bd412a6770685e3324ae3b61e176caff7846192d1ee63d55cd621e26")
_WESNOTH_CAMPAIGN_HASHES = {  # the 16 official campaigns, one package each (their dialogue and story text)
    "did": "774619f5aaeb7eb4c848e1cc1758795a8c58e96bd270cceecc9d847dbcc769b3",
    "dm": "1997ad4d91e8de36415db2a3445904288f588a76d75111222d2aace409ace5c6",
    "dw": "47982e08b2a5d5fd79f400a5453f32c6d7dd56f2ccc10412a9e47dec8a9b3ca4",
    "ei": "687abe111ee662b7324336ddadc209758f68d2eeb1ccbf630238f27a0e3c6404",
    "httt": "05b16a3f8f8204278794aae14d8e6a7c95d2b2faef7337c4997c827a146d1bbd",
    "l": "5383c79046df6121929bc36a8ec3f970ab4cf9c1239ed9b31868201c27f4266d",
    "low": "2f304551b97b7fb76a2adb5ad8ffcac3e78476bc8ade17532c90714065c9bf9f",
    "nr": "13edcf1bdd23708f531ba81c67100c5800363a119f10155c7f9e146fe7dced34",
    "sof": "b6f1ddffdbd1a977f3965dae944e4fb11c147627471f1cfc71c92d1e69efb555",
    "sota": "fa44304ff53d259f3c5fe13c03cb8166e55e9c307807d1a5663048c396645ba6",
    "sotbe": "877a2f4a7fd8df54fd3b4561ffbd5fa95d0390d7c7372f3cb66367c8007918cb",
    "thot": "79d9ec6e43300ea9f41295ccf3fb451e8eeaefc17007123f65d77eb05cb88695",
    "trow": "b5009e964ac7157a46d50de911e4f56f5bb4389d60b82a513b5f382671d180d7",
    "tsg": "38b5f564253b8e0d9c093b2b7c58aabfef24f688968d9cbaf42abfc1e76d8288",
    "ttb": "d0d45693665305191488553ade8dc1d0aa26ab17d4bffae3bf6969db4a766329",
    "utbs": "81e05717bebbfb6348c0bed2cd6ce2560c4fd9205ed419c2e7bc039b4a70e228",
}
WESNOTH_CAMPAIGNS = tuple(
    debian(f"wesnoth-1.16-{name}=1:1.16.9-1", f"pool/main/w/wesnoth-1.16/wesnoth-1.16-{name}_1.16.9-1_all.deb", sha256)
    for name, sha256 in _WESNOTH_CAMPAIGN_HASHES.items())

_GAME_TAG = re.compile(r"</?(color|info|good|bad|italic|bold|b|i|u|span|ref|header|format|img|jump|big|small|"
                       r"font|emphasis|stat|id|em)\b[^<>]*>")
_PLACEHOLDER = re.compile(r"<[^<>]*>|%[sdif0-9]|\$\w|\{\w|@\w+@|\[\[|\]\]")  # <npc_name>, %s, $unit.name, @foe@
_NOT_PROSE = re.compile(r"[{}|\\#=_^~]")


class _SentenceFilter:
    """Sentences of game text: markup tags removed; sentences left with placeholders ("<npc_name>", "%s") or seen
    before (the same description copied to variants, repeated lines) dropped, so that no boilerplate repeats."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def documents(self, documents: Iterable[Iterable[str]]) -> list[list[str]]:
        """The documents' sentences that pass, sentences never seen before only; documents left empty dropped."""
        kept = []
        for document in to_documents([tidy(_GAME_TAG.sub("", html.unescape(t))) for t in texts]
                                     for texts in documents):
            sentences = []
            for sentence in document:
                if sentence not in self.seen and self._passes(sentence):
                    self.seen.add(sentence)
                    sentences.append(sentence)
            if sentences:
                kept.append(sentences)
        return kept

    @staticmethod
    def _passes(sentence: str) -> bool:
        """A complete sentence of at least three words, mostly letters, without placeholders or code."""
        text = sentence.replace(" ", "")
        return (not _PLACEHOLDER.search(sentence) and sentence.rstrip("\"'”’)]").endswith((".", "!", "?", "…"))
                and len(sentence.split()) >= 3 and bool(text) and sum(c.isalpha() for c in text) >= 0.75 * len(text)
                and not _NOT_PROSE.search(text))


# ----------------------------------------------------------------------------------------------------------------
# "cataclysm": Cataclysm: Dark Days Ahead (JSON data: item, monster and place descriptions, NPC dialogue, snippets)

_CATACLYSM_DIR = "usr/share/games/cataclysm-dda/"
_CATACLYSM_KEYS = frozenset("""description text dynamic_line messages offer yes no desc advice success accepted info
job_description rejected failure describe message msg sound detailed_definition initiate hostile_msg friendly_msg
player_descriptions success_lie inquire memorial_message apply_message""".split())


def _json_strings(value: object, key: str | None = None) -> Iterator[str]:
    """The strings under the wanted keys of parsed JSON, at any depth ({"str": ...} translation objects too)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in _CATACLYSM_KEYS or (k in ("str", "str_sp") and key in _CATACLYSM_KEYS):
                yield from _json_strings(v, k)
            elif isinstance(v, (dict, list)):
                yield from _json_strings(v, None if k.startswith("//") else key)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v, key)
    elif isinstance(value, str) and key in _CATACLYSM_KEYS:
        yield value


def parse_cataclysm(cache: Path) -> list[list[str]]:
    """Each JSON data file (one kind of item, monster, mutation, place or one NPC's dialogue) is a document of
    its descriptions, dialogue lines and lore snippets; names, ids, map rows and comments are not read."""
    files = deb_files(fetch(CATACLYSM, cache), lambda n: n.startswith(_CATACLYSM_DIR) and n.endswith(".json"))
    documents = []
    for _, data in sorted(files):
        try:
            parsed = json.loads(data)
        except ValueError:
            continue
        documents.append([s.replace("\n", " ") for s in _json_strings(parsed)])
    return _SentenceFilter().documents(documents)


# ----------------------------------------------------------------------------------------------------------------
# "endless-sky": Endless Sky (missions' conversations, planet, ship and outfit descriptions, dialogs, logs)

_ENDLESS_SKY_DIR = "usr/share/games/endless-sky/data/"
_ES_STRING = re.compile(r'^\t*(?:(description|spaceport|dialog|log|message)\s+)?(`[^`]*`|"[^"]*")\s*$')


def _endless_sky_objects(text: str) -> Iterator[list[str]]:
    """The text lines of each top-level object of a data file that has any."""
    document: list[str] = []
    for line in text.splitlines():
        if line and not line[0].isspace():  # a new top-level object
            if document:
                yield document
            document = []
            continue
        match = _ES_STRING.match(line)
        if match and (match.group(1) or match.group(2).startswith("`")):
            document.append(match.group(2)[1:-1])
    if document:
        yield document


def parse_endless_sky(cache: Path) -> list[list[str]]:
    """Each top-level object of the data files (a mission with its conversations, a planet, a ship, an outfit) is
    a document of its text lines: backquoted conversation lines and the quoted strings after description,
    spaceport, dialog, log and message."""
    files = deb_files(fetch(ENDLESS_SKY, cache), lambda n: n.startswith(_ENDLESS_SKY_DIR) and n.endswith(".txt"))
    return _SentenceFilter().documents(d for _, data in sorted(files) for d in _endless_sky_objects(file_text(data)))


# ----------------------------------------------------------------------------------------------------------------
# "crawl": Dungeon Crawl Stone Soup (the English description database: monsters, items, gods, places, spells)

_CRAWL_DIR = "usr/share/crawl/dat/descript/"
# quotations of others' books, key bindings and the tutorial's instructions
_CRAWL_SKIPPED = frozenset({"quotes.txt", "commands.txt", "tutorial.txt", "hints.txt"})


def parse_crawl(cache: Path) -> list[list[str]]:
    """Each entry of the English description files ("%%%%"-separated: a key line, then text) is a document."""
    files = deb_files(fetch(CRAWL, cache), lambda n: n.startswith(_CRAWL_DIR) and n.count("/") == _CRAWL_DIR.count("/")
                      and n.endswith(".txt"))
    documents = []
    for name, data in sorted(files):
        if name.rsplit("/", 1)[1] in _CRAWL_SKIPPED:
            continue
        for entry in file_text(data).split("%%%%"):
            lines = [line for line in entry.strip().splitlines() if not line.startswith("#")]
            body = "\n".join(lines[1:]).strip()  # the first line is the key
            if body:
                documents.append([p for [p] in paragraphs(body)])
    return _SentenceFilter().documents(documents)


# ----------------------------------------------------------------------------------------------------------------
# "wesnoth": Battle for Wesnoth 1.16 (unit and terrain descriptions, help, tips, the campaigns' dialogue and story)

_WESNOTH_DIR = "usr/share/games/wesnoth/1.16/data/"
_WML_STRING = re.compile(r'_\s*"((?:[^"]|"")*)"')  # a translatable WML string; "" is an escaped quote
_WML_CONTEXT = re.compile(r"^[\w ]+\^")  # "female^" before a variant of a string


def parse_wesnoth(cache: Path) -> list[list[str]]:
    """Each WML file's translatable strings of at least 3 words (descriptions, dialogue, story, help, tips) form a
    document: the core data's files (units, terrain, help) and each scenario of the 16 official campaigns, whose
    dialogue runs in order; "female^"-style context prefixes and markup are removed."""
    documents = []
    for package in (WESNOTH, *WESNOTH_CAMPAIGNS):
        for _, data in sorted(deb_files(fetch(package, cache),
                                           lambda n: n.startswith(_WESNOTH_DIR) and n.endswith(".cfg"))):
            strings = [_WML_CONTEXT.sub("", s.replace('""', '"')) for s in _WML_STRING.findall(file_text(data))]
            documents.append([p for s in strings if len(s.split()) >= 3 for [p] in paragraphs(s)])
    return _SentenceFilter().documents(documents)


# ----------------------------------------------------------------------------------------------------------------
# "crossfire": Crossfire's archetype and artifact descriptions, its book messages and its maps' signs and dialogue

_CROSSFIRE_DIR = "usr/share/games/crossfire/"
_CROSSFIRE_MAP_NOTE = re.compile(r"^\s*(@\w+.*|Created\b.*|Modified\b.*|Made by\b.*|[A-Z][\w ]*: \d.*)$", re.MULTILINE)
_CROSSFIRE_MSG = re.compile(r"^msg\n(.*?)^endmsg", re.MULTILINE | re.DOTALL)
_CROSSFIRE_BOOK = re.compile(r"^TEXT\n(.*?)^ENDMSG", re.MULTILINE | re.DOTALL)


def _crossfire_map_texts(name: str, text: str) -> list[str]:
    """What a map file says: an NPC's dialogue rules (a .msg file, JSON), else its objects' messages (signs,
    books, NPC speech) without map notes and @match dialogue keys."""
    if not name.endswith(".msg"):
        return [_CROSSFIRE_MAP_NOTE.sub("", m) for m in _CROSSFIRE_MSG.findall(text)]
    try:
        rules = json.loads(text).get("rules", [])
    except (ValueError, AttributeError):
        return []
    return ["\n\n".join(m for rule in rules if isinstance(rule, dict) for m in rule.get("msg", [])
                        if isinstance(m, str))]


def parse_crossfire(cache: Path) -> list[list[str]]:
    """Each object description (msg ... endmsg in archetypes and artifacts), each book text (messages), and each
    message on the maps of crossfire-maps (signs, books, NPCs' speech, their .msg dialogue rules) is a document;
    dialogue keys (@match), map notes ("Created ...") and the class lists before "---" are dropped."""
    files = dict(deb_files(fetch(CROSSFIRE, cache), lambda n: n.startswith(_CROSSFIRE_DIR) and
                           n[len(_CROSSFIRE_DIR):] in ("archetypes", "artifacts", "messages")))
    texts = [m for name in ("archetypes", "artifacts")
             for m in _CROSSFIRE_MSG.findall(file_text(files[_CROSSFIRE_DIR + name]))]
    texts += _CROSSFIRE_BOOK.findall(file_text(files[_CROSSFIRE_DIR + "messages"]))
    for name, data in deb_files(fetch(CROSSFIRE_MAPS, cache), lambda n: n.startswith(_CROSSFIRE_DIR + "maps/")
                                and not n.endswith((".py", ".png", ".lua"))):
        texts += _crossfire_map_texts(name, file_text(data))
    documents = [[p for [p] in paragraphs(text.split("\n---\n", 1)[-1])] for text in texts]
    return _SentenceFilter().documents(documents)
