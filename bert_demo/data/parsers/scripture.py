"""The Bible and a commentary on it, from SWORD modules in Debian: "bible" (the World English Bible with the
Deuterocanon) and "mhcc" (Matthew Henry's Concise Commentary), a chapter per document.

A SWORD zText or zCom module keeps each testament as a .bzs index of blocks and a .bzz of zlib-compressed blocks of
OSIS markup; both are read here without the SWORD library, and the markup is removed.
"""
from __future__ import annotations

import html
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from bert_demo.data.parsers.packages import deb_files, debian, fetch
from bert_demo.data.parsers.prose import dedupe, tidy
from bert_demo.data.sentences import to_documents

WEB_BIBLE = debian("sword-text-web=426.0-1", "pool/main/s/sword-text-web/sword-text-web_426.0-1_all.deb",
                   "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1")
MHCC = debian("sword-comm-mhcc=2.0-1", "pool/main/s/sword-comm-mhcc/sword-comm-mhcc_2.0-1_all.deb",
              "06f748215de78ff48fdfdee93e3ffc5af6318b976485f7aedf22309236967e35")

_WEB_DIR = "usr/share/sword/modules/texts/ztext/engWEB2015eb/"
_MHCC_DIR = "usr/share/sword/modules/comments/zcom/mhcc/"
_OSIS_DROPPED = re.compile(r"<(note|title|speaker)\b[^>]*>.*?</\1>", re.DOTALL)  # footnotes, headings, speakers
_MHCC_DROPPED = re.compile(r"<(note|title|table|reference)\b[^>]*>.*?</\1>|<hi type=\"bold\">.*?</hi>", re.DOTALL)
_OSIS_CHAPTER = re.compile(r"<chapter\b[^>]*\bsID=[^>]*>")
_TAG = re.compile(r"<[^>]*>")


def sword_ztext(index: bytes, blocks: bytes) -> str:
    """The text of a zText or zCom module's testament: its .bzs lists each block as (offset, size, uncompressed
    size), three little-endian 32-bit integers, of zlib streams in its .bzz; the blocks (one or more books each)
    are in order."""
    text = []
    for i in range(0, len(index), 12):
        offset, size, _ = struct.unpack("<III", index[i:i + 12])
        text.append(zlib.decompress(blocks[offset:offset + size]).decode("utf-8"))
    return "".join(text)


def _module_osis(files: dict[str, bytes], directory: str) -> str:
    """A SWORD module's OSIS text, Old Testament then New, from its files in `directory`."""
    return "".join(sword_ztext(files[directory + f"{t}.bzs"], files[directory + f"{t}.bzz"]) for t in ("ot", "nt"))


def _osis_chapters(osis: str, dropped: re.Pattern) -> Iterator[str]:
    """The text of each chapter of an OSIS stream, the elements `dropped` matches removed (what comes before the
    first chapter is dropped)."""
    for chapter in _OSIS_CHAPTER.split(dropped.sub(" ", osis))[1:]:
        yield tidy(html.unescape(_TAG.sub(" ", chapter)))


def parse_bible(cache: Path) -> list[list[str]]:
    """Each chapter is a document (the preface and book introductions before Genesis 1 are dropped); OSIS markup,
    footnotes, section headings and the Song of Songs' speaker labels are removed."""
    files = dict(deb_files(fetch(WEB_BIBLE, cache), lambda n: n.startswith(_WEB_DIR)))
    return to_documents(([text] for text in _osis_chapters(_module_osis(files, _WEB_DIR), _OSIS_DROPPED)),
                        complete_only=True)


def parse_mhcc(cache: Path) -> list[list[str]]:
    """Matthew Henry's Concise Commentary on the Whole Bible (1706-21, abridged): the commentary on each chapter is
    a document; its "Verses 1-5" labels, titles and verse references are removed."""
    files = dict(deb_files(fetch(MHCC, cache), lambda n: n.startswith(_MHCC_DIR)))
    return dedupe(to_documents(([text] for text in _osis_chapters(_module_osis(files, _MHCC_DIR), _MHCC_DROPPED)),
                               complete_only=True))
