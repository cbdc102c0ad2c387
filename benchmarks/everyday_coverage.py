"""Which of benchmarks/everyday_english.py's sixty sentences a corpus covers: does it hold enough text about what each
sentence is about for a model to learn its answer?

A sentence is covered when at least N (--min, 3 by default) sentences of the corpus hold one of its fitting words and
one of its own content words (its words other than [MASK] and the stop words below): for "she put the milk back in the
[MASK]." (fridge, kitchen, cupboard, ...), sentences such as "Put the milk in the fridge." Words are compared whole,
lower case, with a final "s" taken off (so "days" meets "day"). It says nothing of whether the model learns them; it
counts where the text could teach them. A large corpus covers them by its size alone, so each corpus's density is
given too: the median, over the sixty, of such sentences per million words of it. It also counts the corpus's
sentences that fill in a benchmark sentence itself, which should be none: a corpus that holds the test teaches it.

    python benchmarks/everyday_coverage.py ding v4 v5 [--min 3] [--show]
"""
from __future__ import annotations

import argparse
import re
import statistics
from collections.abc import Iterable

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import print_table
from everyday_english import SENTENCES, fitting

from bert_demo.data.corpus import load_corpus, word_count
from bert_demo.data.sources import is_benchmark_sentence

STOP_WORDS = frozenset(  # function words, and the light verbs and particles that say nothing of a topic
    "a an the to of in on at for with and or but so because as by from into than too very it its is are was were be "
    "been has have had do does did not that this there their they them he his him she her i my me we our us you your "
    "what when who how every some then will can could would please just put get go went take make keep need back out "
    "off up down over".split())
_WORD = re.compile(r"[a-z']+|\d+")


def stem(word: str) -> str:
    """A word with a final "s" taken off ("days" -> "day"), so that a plural meets its singular."""
    return word[:-1] if word.endswith("s") and len(word) > 3 else word


def words(sentence: str) -> set[str]:
    """A sentence's words, lower case and stemmed."""
    return {stem(w) for w in _WORD.findall(sentence.lower().replace("’", "'"))}


def content_words(template: str) -> set[str]:
    """A benchmark sentence's own words that say what it is about: not [MASK], not a stop word."""
    found = _WORD.findall(template.lower().replace("[mask]", " "))
    return {stem(w) for w in found if w not in STOP_WORDS and stem(w) not in STOP_WORDS}


def evidence(sentences: Iterable[set[str]]) -> list[int]:
    """For each benchmark sentence, how many of these sentences (as word sets) hold one of its fitting words and one
    of its content words."""
    wanted = [({stem(w) for w in fitting(answers)}, content_words(template)) for template, answers in SENTENCES]
    counts = [0] * len(SENTENCES)
    for sentence in sentences:
        for i, (answers, context) in enumerate(wanted):
            if sentence & answers and sentence & context:
                counts[i] += 1
    return counts


def coverage(documents: list[list[str]]) -> tuple[list[int], int]:
    """(each benchmark sentence's evidence count, how many of the corpus's sentences fill in a benchmark sentence)."""
    sentences = [s for document in documents for s in document]
    return evidence(map(words, sentences)), sum(map(is_benchmark_sentence, sentences))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpora", nargs="+", help="named corpora or mixes, each scored on its own (ding, v4, ...)")
    parser.add_argument("--min", type=int, default=3, help="sentences of evidence a covered sentence needs")
    parser.add_argument("--show", action="store_true", help="print each benchmark sentence's evidence counts")
    args = parser.parse_args()
    rows, table = [], {}
    for corpus in args.corpora:
        documents = load_corpus(corpus)
        counts, held = coverage(documents)
        table[corpus] = counts
        covered = sum(c >= args.min for c in counts)
        words_in = word_count(documents)
        density = statistics.median(c / words_in * 1e6 for c in counts)
        rows.append([corpus, f"{words_in:,}", f"{covered} / {len(SENTENCES)}", f"{covered / len(SENTENCES):.0%}",
                     f"{density:.1f}", str(held)])
    if args.show:
        rows_by_sentence = [[template, *(str(table[c][i]) for c in args.corpora)]
                            for i, (template, _) in enumerate(SENTENCES)]
        print_table(["benchmark sentence", *args.corpora], rows_by_sentence)
    print_table(["corpus", "words", f"covered (>= {args.min} sentences)", "share", "median per M words",
                 "benchmark sentences in it"], rows)


if __name__ == "__main__":
    main()
