"""Reference text: Wikipedia articles ("wiki" inside gensim's wheel; "wikitext-2" and "wikitext-103" from the
Hugging Face Hub) and WordNet's definitions, turned into sentences ("wordnet", Debian's wordnet-base)."""
from __future__ import annotations

import bz2
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_demo.config import hub_reachable
from bert_demo.data.parsers.packages import deb_files, debian, fetch, file_text
from bert_demo.data.parsers.prose import MIN_PROSE_WORDS, dedupe, indefinite_article
from bert_demo.data.sentences import to_documents

WIKI_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WORDNET = debian("wordnet-base=1:3.0-37", "pool/main/w/wordnet/wordnet-base_3.0-37_all.deb",
                 "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752")

# ----------------------------------------------------------------------------------------------------------------
# "wiki": Wikipedia articles inside gensim's wheel

_END_SECTIONS = re.compile(r"=+\s*(References|Notes|Footnotes|Citations|See also|External links|Further reading|"
                           r"Bibliography|Sources)\s*=+", re.IGNORECASE)
_PROSE_START = re.compile(r"""["“(]?[A-Z0-9]""")  # not lists, tables, or the tail of a line cut by markup
_WIKI_FIXES = [  # (pattern, replacement), in order: what filter_wiki leaves behind
    (re.compile(r"'{2,}"), ""),  # bold and italic quotes
    (re.compile(r"\(\s*[,;][\s,;]*"), "("),  # "( ; , ''Didymaios''" where a pronunciation was removed
    (re.compile(r"\s*\([^\w()]*\)"), ""),  # parentheses left empty or with only symbols: "()", "(; )", "(%)"
    (re.compile(r"\s+([,.;:])"), r"\1"),  # space before punctuation where a template was removed
]


def parse_wiki(cache: Path) -> list[list[str]]:
    """Each non-redirect article is a document; its prose paragraphs (up to "References" etc.) give sentences."""
    import gensim
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    with bz2.open(Path(gensim.__file__).parent / WIKI_DUMP) as dump:
        pages = [text for _, text, _ in extract_pages(dump)]
    articles = (filter_wiki(text) for text in pages if not text.lstrip().upper().startswith("#REDIRECT"))
    return to_documents((_wiki_paragraphs(article) for article in articles), complete_only=True)


def _wiki_paragraphs(article: str) -> Iterator[str]:
    """Lines of running prose, cleaned; headings, lists, tables, captions and the closing sections are skipped."""
    for line in article.splitlines():
        line = line.strip()
        if _END_SECTIONS.fullmatch(line):
            return
        for pattern, replacement in _WIKI_FIXES:
            line = pattern.sub(replacement, line)
        if _PROSE_START.match(line) and "|" not in line and len(line.split()) >= MIN_PROSE_WORDS:
            yield line


# ----------------------------------------------------------------------------------------------------------------
# "wikitext-2" and "wikitext-103": the Hugging Face datasets (Merity et al. 2016), 2 M and 103 M words

_WIKITEXT_TITLE = re.compile(r" = [^=].* = ")  # " = Valkyria Chronicles III = "; sections are " = = Gameplay = = "
_WIKITEXT_ESCAPE = re.compile(r" @(.)@ ")  # "1 @,@ 000", "well @-@ known"


def parse_wikitext(name: str, cache: Path) -> list[list[str]]:
    """Articles split at their top-level titles; section headings are dropped, paragraphs give sentences."""
    if not hub_reachable():
        raise ValueError(f"could not load {name}: the Hugging Face Hub is not reachable from here. Use wiki or news, "
                         "which work offline")
    try:
        import datasets

        lines = datasets.load_dataset("wikitext", f"{name}-raw-v1", split="train")["text"]
    except Exception as error:  # offline, the hub raises ConnectionError, OSError or its own errors
        raise ValueError(f"could not load {name}: the Hugging Face Hub is not reachable from here "
                         f"({type(error).__name__}). Use wiki or news, which work offline") from error
    articles: list[list[str]] = []
    for line in lines:
        if _WIKITEXT_TITLE.fullmatch(line.rstrip("\n")):
            articles.append([])
        elif articles and line.strip() and not line.lstrip().startswith("="):
            articles[-1].append(_WIKITEXT_ESCAPE.sub(r"\1", line))
    return to_documents(articles)


# ----------------------------------------------------------------------------------------------------------------
# "wordnet": WordNet 3.0's glosses and examples, one sentence per synset

_WORDNET_DIR = "usr/share/wordnet/"
_WN_EXAMPLE = re.compile(r'"([^"]+)"(?:\s*-+\s*[^;"]*)?')  # an example and its attribution: "..." - John Galsworthy
_WN_LEADING_NOTE = re.compile(r"^(\([^()]*\)\s*)+")  # "(usually followed by `to') having ...", "(British) ..."
_WN_MARKER = re.compile(r"\((a|p|ip)\)$")  # adjective position markers: "galore(ip)"
_WN_QUOTE = re.compile(r"`([^'`]*)'")  # WordNet's `quoted' words
_WN_HEAD_NOUN_END = re.compile(r"[;,(]| (?:of|that|which|who|with|in|on|for|from|to|and|or|used|having|found|"
                               r"native|especially|usually|formerly)\b")
MAX_WN_EXAMPLES = 3
MAX_WN_SYNONYMS = 3
# first words of a noun's gloss that take no article: determiners, pronouns, prepositions, adverbs, mass nouns
_WN_NO_ARTICLE = frozenset("""a an the any some someone somebody something anything everything nothing one two three
four either neither each every all both many several most much more less few no another other in of on at by for from
to with without as used having very widely chiefly formerly especially usually often sometimes typically mainly
mostly originally now also either not only loosely informal slang flesh water food people meat wood material money
music information news advice equipment evidence knowledge land""".split())


@dataclass
class _Synset:
    pos: str
    words: list[str]
    pointers: list[tuple[str, str]]  # (symbol, "offset pos")
    gloss: str


def _wordnet_synsets(data: str) -> dict[str, _Synset]:
    """{"offset pos": synset} from one data.<pos> file (its licence header lines start with two spaces)."""
    synsets = {}
    for line in data.splitlines():
        if not line or line.startswith("  "):
            continue
        fields, _, gloss = line.partition(" | ")
        parts = fields.split()
        count = int(parts[3], 16)
        words = [_WN_MARKER.sub("", w).replace("_", " ") for w in parts[4:4 + 2 * count:2]]
        at = 4 + 2 * count
        pointers = [(parts[at + 1 + 4 * i], f"{parts[at + 2 + 4 * i]} {parts[at + 3 + 4 * i]}".replace(" s", " a"))
                    for i in range(int(parts[at]))]
        ss_type = "a" if parts[2] == "s" else parts[2]
        synsets[f"{parts[0]} {ss_type}"] = _Synset(parts[2], words, pointers, gloss.strip())
    return synsets


def _wordnet_sentence(synset: _Synset) -> str:
    """'A kill is the destruction of an enemy plane or ship or tank or missile, as in "the pilot reported two kills
    during the mission".' Nouns: "(A) X is ...", verbs: "To x is to ...", adjectives and adverbs: "X means ..."."""
    definition, _, rest = synset.gloss.partition('"')
    definition = _WN_LEADING_NOTE.sub("", definition.strip().rstrip(";").strip())
    definition = _WN_QUOTE.sub(r'"\1"', definition).rstrip(" .;:")
    examples = [_WN_QUOTE.sub(r"'\1'", e).strip(" .") for e in _WN_EXAMPLE.findall('"' + rest)][
        :MAX_WN_EXAMPLES] if rest else []
    word, synonyms = synset.words[0], [w for w in synset.words[1:] if w.lower() != synset.words[0].lower()]
    also = f", or {' or '.join(synonyms[:MAX_WN_SYNONYMS])}," if synonyms else ""
    if synset.pos == "n":
        definition = _noun_definition(definition)
        sentence = f"{_noun_subject(word, definition)}{also} is {definition}"
    elif synset.pos == "v":
        sentence = f"To {word}{also} is to {definition}"
    else:
        sentence = f"{word[:1].upper() + word[1:]}{also} means {definition}"
    if examples:
        sentence += ", as in " + _and_list([f'"{e}"' for e in examples])
    return sentence + "."


def _noun_definition(definition: str) -> str:
    """A noun's gloss with "a" or "an" before it where it is countable ("Flax is a plant of ..." for "plant of
    ..."): not before a determiner, a preposition, a mass noun, a gerund, a number or a plural head noun."""
    first = definition.split(" ", 1)[0]
    head_noun = _WN_HEAD_NOUN_END.split(definition, maxsplit=1)[0].split()[-1:]
    plural = bool(head_noun) and bool(re.fullmatch(r"[a-z-]+[^su]s", head_noun[0]))
    if not (first.lower() in _WN_NO_ARTICLE or first.endswith("ing") or first[:1].isdigit() or plural):
        return indefinite_article(first) + " " + definition
    return definition


def _noun_subject(word: str, definition: str) -> str:
    """The subject of a noun's sentence: "A flax" where its definition (from `_noun_definition`) starts with "a" or
    "an" and the word is not a name, else "Flax"."""
    if re.match(r"an? ", definition) and word[:1].islower():
        return indefinite_article(word).capitalize() + " " + word
    return word[:1].upper() + word[1:]


def _and_list(items: list[str]) -> str:
    """"x", "x and y", "x, y and z"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def parse_wordnet(cache: Path) -> list[list[str]]:
    """One sentence per synset (its lemma, up to three synonyms, its definition and up to three examples), grouped
    into documents of related synsets (see `_wordnet_groups`)."""
    files = dict(deb_files(fetch(WORDNET, cache), lambda n: n.startswith(_WORDNET_DIR + "data.")))
    synsets: dict[str, _Synset] = {}
    for name in ("noun", "verb", "adj", "adv"):
        synsets.update(_wordnet_synsets(file_text(files[_WORDNET_DIR + "data." + name])))
    documents = ([_wordnet_sentence(synsets[k]) for k in group] for group in _wordnet_groups(synsets))
    return dedupe(to_documents(documents, complete_only=True))


def _first_pointer(pointers: list[tuple[str, str]], symbols: tuple[str, ...], default: str | None) -> str | None:
    """The target of a synset's first pointer of one of these kinds (hypernym "@", similar-to "&", ...)."""
    return next((t for s, t in pointers if s in symbols), default)


def _wordnet_groups(synsets: dict[str, _Synset]) -> list[list[str]]:
    """Keys of related synsets: nouns and verbs with their siblings (the synsets sharing their first hypernym; a
    lone one joins its parent's siblings), adjectives in their clusters (a head adjective and its satellites),
    adverbs with the cluster of the adjective they derive from (else in runs of 10 in file order)."""
    groups: dict[str, list[str]] = {}
    loose_adverbs: list[str] = []
    for key, synset in synsets.items():
        if synset.pos in "nv":
            parent = _first_pointer(synset.pointers, ("@", "@i"), key)
        elif synset.pos in "as":
            parent = key if synset.pos == "a" else _first_pointer(synset.pointers, ("&",), key)
        else:
            adjective = _first_pointer(synset.pointers, ("\\",), None)
            if adjective is None or adjective not in synsets:
                loose_adverbs.append(key)
                continue
            head = synsets[adjective]
            parent = adjective if head.pos == "a" else _first_pointer(head.pointers, ("&",), adjective)
        groups.setdefault(f"{synset.pos[0] if synset.pos != 's' else 'a'}:{parent}", []).append(key)
    for key, group in list(groups.items()):
        pos, _, parent = key.partition(":")
        if len(group) == 1 and pos in "nv" and parent in synsets:
            grandparent = _first_pointer(synsets[parent].pointers, ("@", "@i"), None)
            if grandparent and f"{pos}:{grandparent}" in groups and f"{pos}:{grandparent}" != key:
                groups[f"{pos}:{grandparent}"] += groups.pop(key)
    return list(groups.values()) + [loose_adverbs[i:i + 10] for i in range(0, len(loose_adverbs), 10)]
