"""Technical documentation from Debian, its prose only (never code, signatures, tables or navigation): the HTML
manuals of Python ("python-docs"), Django, PostgreSQL, the Linux kernel, SQLite and Git, Perl's POD manuals
("perl-docs") and the Linux man-pages project's roff pages ("manpages").

A paragraph is kept when it reads as running prose, and a sentence only without code-like words (calls, options,
operators, paths), so that a model trained on it learns how programmers write about code, not the code itself.
"""
from __future__ import annotations

import html
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

from bert_demo.data.parsers.packages import Package, deb_files, debian, fetch, file_text
from bert_demo.data.parsers.prose import LETTERS, MIN_PROSE_WORDS, dedupe, squash
from bert_demo.data.sentences import paragraphs, to_documents

PYTHON_DOC = debian("python3.11-doc=3.11.2-6+deb12u8",
                    "pool/main/p/python3.11/python3.11-doc_3.11.2-6+deb12u8_all.deb",
                    "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b")
DJANGO_DOC = debian("python-django-doc=3:3.2.25-0+deb12u3",
                    "pool/main/p/python-django/python-django-doc_3.2.25-0+deb12u3_all.deb",
                    "33319c8e45b95693603213442ccf9bcee933ef338488115203ad25a0e01c696f")
POSTGRES_DOC = debian("postgresql-doc-15=15.18-0+deb12u1",
                      "pool/main/p/postgresql-15/postgresql-doc-15_15.18-0+deb12u1_all.deb",
                      "3c598277a463c44d672daa2c335deb8d8252e1852fb025fd4578ea2d9a1b90f0")
LINUX_DOC = debian("linux-doc-6.1=6.1.176-1", "pool/main/l/linux/linux-doc-6.1_6.1.176-1_all.deb",
                   "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f")
SQLITE_DOC = debian("sqlite3-doc=3.40.1-2+deb12u2", "pool/main/s/sqlite3/sqlite3-doc_3.40.1-2+deb12u2_all.deb",
                    "466e30d7066e2641fa13e56bc662a2ad521b8cc9c17dde9c9dac3d4f105e32f2")
GIT_DOC = debian("git-doc=1:2.39.5-0+deb12u3", "pool/main/g/git/git-doc_2.39.5-0+deb12u3_all.deb",
                 "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec")
PERL_DOC = debian("perl-doc=5.36.0-7+deb12u3", "pool/main/p/perl/perl-doc_5.36.0-7+deb12u3_all.deb",
                  "e9e3564ff5ade27de0585835f2acad769bcc545c0a0045a9f55d5401f27f7591")
MANPAGES = debian("manpages=6.03-2", "pool/main/m/manpages/manpages_6.03-2_all.deb",
                  "efa1ba4cd19ad7baeae959c9209a7eb74be2ebb858bcabb412597bfc9f588c91")

# code, not prose: calls "f(x)", assignments and comparisons, braces, indexing, tags, sigils, pipes, scopes, arrows,
# options ("--force"); dotted names, identifiers with underscores and man page references are allowed ("os.path",
# "max_length", "socket(2)")
_CODE_WORD = re.compile(r"\w\((?!\d\w*\))|=|[{}]|\w\[|<\w|\w>|;\w|[$@#%]\w|\||\\|::|->|^--?\w|^/\w|\w/\w+/")


def _technical_prose(paragraph: str) -> bool:
    """A paragraph of running prose: enough words, letters, and few code-like words (calls, paths, operators)."""
    words = paragraph.split()
    if len(words) < MIN_PROSE_WORDS or not LETTERS.match(paragraph.lstrip("\"'(“‘")):
        return False
    code = sum(bool(_CODE_WORD.search(w)) for w in words)
    letters = sum(c.isalpha() for c in paragraph)
    return code <= 0.1 * len(words) and letters >= 0.7 * len(paragraph.replace(" ", ""))


def _technical_documents(documents: list[list[str]]) -> list[list[str]]:
    """Each document's prose paragraphs as sentences that start like one (a capital, a digit or an opening quote)
    and have no code-like words; documents left empty, or seen before, are dropped."""
    kept = []
    for document in to_documents([[p for p in texts if _technical_prose(p)] for texts in documents],
                                 complete_only=True):
        sentences = [s for s in document if (s[0].isupper() or s[0].isdigit() or s[0] in "\"'“‘(")
                     and not _CODE_WORD.search(s)]
        if sentences:
            kept.append(sentences)
    return dedupe(kept)


# ----------------------------------------------------------------------------------------------------------------
# HTML manuals: the prose paragraphs (<p>) of each page

_VOID_TAGS = frozenset({"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source"})


class _HTMLParagraphs(HTMLParser):
    """The text of each <p> of an HTML page that is not inside code, a table, navigation, a sidebar, a footer or
    an admonition's title; inline markup (links, <code>, emphasis) keeps its text."""

    SKIPPED = frozenset({"pre", "table", "script", "style", "nav", "footer", "header", "head", "math", "svg",
                         "object", "dl.field-list"})
    SKIPPED_CLASSES = re.compile(r"\b(navheader|navfooter|sphinxsidebar|related|footer|toc|toctree-wrapper|"
                                 r"highlight|literal-block|doctest|admonition-title|sidebar|navigation|breadcrumbs|"
                                 r"versionmodified|programlisting|screen|synopsis|cmdsynopsis|funcsynopsis|"
                                 r"refsynopsisdiv|contents|topic|deprecated|rubric)\b")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.stack: list[bool] = []  # for each open element: whether it (or an ancestor) is skipped
        self.text: list[str] | None = None
        self.api = False  # after a C API entry (kernel-doc: its "Description" paragraphs follow it) until a heading

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID_TAGS:
            return
        classes = dict(attrs).get("class") or ""
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.api = False
        elif tag == "dl" and re.match(r"(c|cpp) ", classes):
            self.api = True
        skipped = (bool(self.stack) and self.stack[-1]) or tag in self.SKIPPED or bool(
            self.SKIPPED_CLASSES.search(classes))
        self.stack.append(skipped)
        if tag == "p" and not skipped and not self.api:
            self.text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID_TAGS:
            return
        if tag == "p" and self.text is not None:
            self.paragraphs.append(squash("".join(self.text)))
            self.text = None
        if self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.text is not None and not (self.stack and self.stack[-1]):
            self.text.append(data)


def html_paragraphs(page: str) -> list[str]:
    """The text of each prose <p> of an HTML page (see _HTMLParagraphs)."""
    parser = _HTMLParagraphs()
    parser.feed(page)
    parser.close()
    return parser.paragraphs


def _html_manual(package: Package, cache: Path, prefix: str, skip: re.Pattern) -> list[list[str]]:
    """Each HTML page under `prefix` in a .deb, unless `skip` finds something in its path, is a document of its
    prose paragraphs."""
    pages = deb_files(fetch(package, cache), lambda n: n.startswith(prefix) and n.endswith((".html", ".html.gz"))
                      and not skip.search(n))
    return _technical_documents([html_paragraphs(file_text(data, name)) for name, data in sorted(pages)])


def parse_python_docs(cache: Path) -> list[list[str]]:
    """The Python 3.11 documentation (tutorial, library and language references, HOWTOs, FAQs, what's new): each
    page's prose paragraphs; code, tables, signatures and navigation are left out."""
    return _html_manual(PYTHON_DOC, cache, "usr/share/doc/python3.11/html/",
                        re.compile(r"/(_sources|_static|genindex|py-modindex|search|copyright|license|bugs|"
                                   r"download|glossary|whatsnew/changelog)"))


def parse_django_docs(cache: Path) -> list[list[str]]:
    """The Django 3.2 documentation: each page's prose paragraphs (release notes are left out: lists of changes)."""
    return _html_manual(DJANGO_DOC, cache, "usr/share/doc/python-django-doc/html/",
                        re.compile(r"/(_sources|_static|_modules|genindex|py-modindex|search|releases/)"))


def parse_postgres_docs(cache: Path) -> list[list[str]]:
    """The PostgreSQL 15 manual: each page's prose paragraphs (release notes are left out)."""
    return _html_manual(POSTGRES_DOC, cache, "usr/share/doc/postgresql-doc-15/html/",
                        re.compile(r"/(release-|bookindex|docguide|biblio)"))


def parse_linux_docs(cache: Path) -> list[list[str]]:
    """The Linux 6.1 kernel documentation (admin guide, process, core and driver APIs, filesystems, networking...):
    each page's prose paragraphs; translations (Chinese, Italian, Japanese, Korean, Spanish) and the generated
    API reference (kernel-doc function descriptions) are left out."""
    return _html_manual(LINUX_DOC, cache, "usr/share/doc/linux-doc-6.1/html/",
                        re.compile(r"/(translations|_sources|_static|_images|genindex|search)\b"))


def parse_sqlite_docs(cache: Path) -> list[list[str]]:
    """The SQLite 3.40 documentation (public domain): each page's prose paragraphs; the release history, the
    C API reference pages (c3ref) and the syntax diagrams are left out."""
    return _html_manual(SQLITE_DOC, cache, "usr/share/doc/sqlite3/",
                        re.compile(r"/(c3ref|releaselog|syntax|changes|chronology|session/|fileio)"))


def parse_git_docs(cache: Path) -> list[list[str]]:
    """The Git 2.39 manual pages, user manual and guides in HTML: each page's prose paragraphs."""
    return _html_manual(GIT_DOC, cache, "usr/share/doc/git-doc/", re.compile(r"/RelNotes"))


# ----------------------------------------------------------------------------------------------------------------
# "perl-docs": Perl 5.36's POD manuals (perlintro, perlsyn, perlre, perlfaq, the tutorials ...)

_POD_DIR = "usr/share/perl/5.36.0/pod/"
_POD_SKIPPED = re.compile(r"perl5\d+delta|perldelta|perltoc|perlhist|perlapi|perlintern|perlmodlib|perlartistic|"
                          r"perlgpl|perliol|perlport|perlvms|perlwin32|perlaix|perl[a-z]*\d*\.pod$(?<=perl\.pod)")
_POD_CODE = re.compile(r"([BIFSCXLEZ])<<+\s(.*?)\s>>+|([BIFSCXLEZ])<([^<>]*)>")
_POD_ESCAPES = {"gt": ">", "lt": "<", "verbar": "|", "sol": "/"}


def _pod_code(match: re.Match) -> str:
    """The text of one formatting code: L<text|target> its text, E<gt> ">", X<index> and Z<> nothing."""
    code, body = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    if code in "XZ":
        return ""
    if code == "E":
        return _POD_ESCAPES.get(body, html.unescape(f"&{body};"))
    if code == "L":
        body = body.split("|", 1)[0] if "|" in body else body.split("/", 1)[-1].strip('"')
    return body


def _pod_text(text: str) -> str:
    """A POD paragraph's text: formatting codes replaced by their text, innermost first, up to four deep."""
    for _ in range(4):
        text = _POD_CODE.sub(_pod_code, text)
    return text


def _pod_paragraphs(pod: str) -> Iterator[str]:
    """A POD file's ordinary paragraphs as text: not commands (headings, items), verbatim code (indented), nor
    what =begin ... =end or a =for paragraph holds."""
    skipping = False
    for [paragraph] in paragraphs(pod):
        if paragraph.startswith("=begin") or paragraph.startswith("=for"):
            skipping = paragraph.startswith("=begin")
            continue
        if skipping:
            skipping = not paragraph.startswith("=end")
            continue
        if not paragraph.startswith(("=", " ", "\t")):
            yield squash(_pod_text(paragraph))


def parse_perl_docs(cache: Path) -> list[list[str]]:
    """Each POD manual of Perl 5.36 is a document of its ordinary paragraphs; the release notes (perl5*delta), the
    table of contents, the API references and the licences are left out."""
    pods = deb_files(fetch(PERL_DOC, cache), lambda n: n.startswith(_POD_DIR) and n.endswith(".pod")
                     and not _POD_SKIPPED.search(n.rsplit("/", 1)[1]))
    return _technical_documents([list(_pod_paragraphs(file_text(data))) for _, data in sorted(pods)])


# ----------------------------------------------------------------------------------------------------------------
# "manpages": the Linux man-pages project's overview pages (section 7) and its section 4, 5 and 8 pages

_MAN_DIR = "usr/share/man/man"
_MAN_ESCAPES = [  # (pattern, replacement), in order
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes \fB \fI \fR \f[CR]
    (re.compile(r"\\\*\((lq|rq)"), '"'), (re.compile(r"\\\(aq"), "'"), (re.compile(r"\\\((em|en)"), "—"),
    (re.compile(r"\\\(.."), ""),  # other special characters
    (re.compile(r"\\\*\[[^\]]*\]|\\\*."), ""),  # strings
    (re.compile(r"\\[&:%|^]"), ""), (re.compile(r"\\[-e]"), lambda m: "-" if m.group() == "\\-" else "\\"),
    (re.compile(r"\\ "), " "), (re.compile(r'\\".*'), ""),  # escaped space, comments
]
_MAN_BREAK = re.compile(r"\.(PP|P|LP|SH|SS|TP|IP|HP|TQ|sp|br|RS|RE|in|ti|TH)\b")
_MAN_FONT_MACRO = re.compile(r"\.(B|I|BR|RB|IR|RI|BI|IB|SM|SB)\s+(.*)")
_MAN_UNFILLED = (".nf", ".EX", ".TS", ".in +4n")  # no-fill blocks, examples, tables, indented examples
_MAN_FILLED = (".fi", ".EE", ".TE", ".in\n", "..")  # their ends
_MAN_HIDDEN_SECTIONS = ("NAME", "SYNOPSIS")


def _man_paragraphs(source: str) -> Iterator[str]:
    """The filled-text paragraphs of a man page in roff: no-fill blocks (.nf/.fi, .EX/.EE), tables (.TS/.TE),
    the tag lines of .TP items, the NAME and SYNOPSIS sections and comments are left out."""
    paragraph: list[str] = []
    skipping, tag_next, section = False, False, ""
    for line in source.splitlines():
        if line.startswith(_MAN_UNFILLED) or line.startswith(".de "):
            skipping = True
            continue
        if line.startswith(_MAN_FILLED) or line.strip() == ".in":
            skipping = False
            continue
        if skipping or line.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if line.startswith("."):
            font = _MAN_FONT_MACRO.match(line)
            if font and not tag_next:  # .B/.I: words in one font; .BR/.IR...: alternating fonts, no space between
                args = re.findall(r'"([^"]*)"|(\S+)', font.group(2))
                joiner = " " if len(font.group(1)) == 1 or font.group(1) in ("SM", "SB") else ""
                paragraph.append(joiner.join(a or b for a, b in args))
                continue
            if _MAN_BREAK.match(line) or font:
                if paragraph and section not in _MAN_HIDDEN_SECTIONS:
                    yield " ".join(paragraph)
                paragraph = []
                tag_next = line.startswith((".TP", ".TQ"))
                if line.startswith(".SH"):
                    section = line[3:].strip().strip('"').upper()
            continue
        if tag_next:  # the tag of a .TP item: an option, a constant, a file
            tag_next = False
            continue
        paragraph.append(line)
    if paragraph and section not in _MAN_HIDDEN_SECTIONS:
        yield " ".join(paragraph)


def _man_text(paragraph: str) -> str:
    """A roff paragraph's text: escapes (fonts, special characters, strings, comments) replaced or removed."""
    for pattern, replacement in _MAN_ESCAPES:
        paragraph = pattern.sub(replacement, paragraph)
    return squash(paragraph)


def parse_manpages(cache: Path) -> list[list[str]]:
    """Each man page of sections 4 (devices), 5 (file formats), 7 (overviews: signals, sockets, locales, ...) and 8
    of the Linux man-pages project is a document of its filled-text paragraphs; pages that only link to another
    (".so") are skipped."""
    pages = deb_files(fetch(MANPAGES, cache), lambda n: n.startswith(_MAN_DIR) and n[len(_MAN_DIR)] in "4578"
                      and n.endswith(".gz"))
    sources = (file_text(data, name) for name, data in sorted(pages))
    return _technical_documents([[_man_text(p) for p in _man_paragraphs(source)] for source in sources
                                 if not source.startswith(".so ")])
