"""One pre-training example, made before a reader's eyes by the code that makes training batches (Devlin et al. 2019,
§3.1 and Appendix A.1): `[CLS] A [SEP] B [SEP]` with its segments and positions, B the next sentences or a random
one, the positions masking picked and what became of each (80% `[MASK]`, 10% a random word, 10% kept), the labels and
the NSP label; the shares of those choices over many draws; and the example's loss under a model.

The example is the first batch of one sequence that `pretraining.sentence_pairs` (the stream training batches come from)
draws with the seed, over the documents given: a visitor's paragraphs, or `SAMPLE_DOCUMENTS` documents of a named
corpus that the seed picks (a whole corpus would take seconds to cut into pairs). Nothing here makes pairs or masks
tokens itself.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.data.corpus import document_sources, is_named, load_corpus, source_parts
from bert_demo.data.masking import FATES, PICKED
from bert_demo.data.pairs import SpecialIds, Tokenized, tokenize_sourced
from bert_demo.data.sentences import MIN_WORDS, paragraphs, to_documents
from bert_demo.config import whole_number
from bert_demo.config import IS_NEXT
from bert_demo.model import IGNORE_INDEX, BertForPreTraining, in_eval_mode
from bert_demo.training.pretraining import sentence_pairs, split_corpus
from bert_demo.training.settings import MAX_SEED, TrainConfig

SAMPLE_DOCUMENTS, SAMPLE_SENTENCES = 32, 24  # passages of a named corpus an example is drawn from, and their length
SHARE_DRAWS, SHARE_BATCH = 1000, 50  # examples drawn to count the shares of each choice, and a batch of them
MAX_TYPED_CHARS = 5000  # a visitor's paragraphs


@dataclass(frozen=True, kw_only=True)
class Documents:
    """Passages of consecutive sentences to draw examples from, each with the name of the source it came from, the
    index of its document there, and the index of its first sentence in that document."""

    documents: list[list[str]]
    sources: list[str]
    numbers: list[int]
    firsts: list[int]


@dataclass(frozen=True, kw_only=True)
class Segment:
    """Sentence A or B as the corpus has it: its sentences, and where they are."""

    sentences: list[str]
    source: str
    document: int  # the document's index in its corpus (or among the typed paragraphs)
    first: int  # the first sentence's index in that document


@dataclass(frozen=True, kw_only=True)
class PretrainingExample:
    """One example as training draws it, and how it was made. Lists run over the input's positions."""

    seed: int
    a: Segment
    b: Segment
    is_next: bool  # the NSP label: B is A's next sentences (IsNext), or a random one (NotNext)
    pieces: list[str]  # the input's word pieces before masking, [CLS] A [SEP] B [SEP]
    shown: list[str]  # what the model reads: the pieces after masking
    input_ids: list[int]  # the ids of `shown`
    token_type_ids: list[int]  # 0 for [CLS] A [SEP], 1 for B [SEP]
    labels: list[int]  # the original id where masking picked the position, else -100 (not scored)
    fates: list[int]  # what masking did to each position: a masking.Fate
    cut: tuple[int, int, int, int]  # pieces cut to fit: from A's front, A's back, B's front, B's back
    batch: dict[str, Tensor]  # the batch of this one example that training would take

    @property
    def picked(self) -> list[int]:
        """The positions masking picked, whose labels the masked-LM loss scores."""
        return [i for i, label in enumerate(self.labels) if label != IGNORE_INDEX]


@dataclass(frozen=True, kw_only=True)
class Shares:
    """How often each choice came up over `draws` examples, beside what the recipe sets."""

    draws: int
    picked: float  # the share of non-special positions picked (the recipe's masking rate)
    fates: dict[str, float]  # the share of picked positions given each fate: [MASK], a random word, kept
    is_next: float  # the share of examples whose B is the next sentence
    mask_prob: float  # the recipe's masking rate
    mask_replace: float  # the recipe's share of the picked made [MASK]
    candidates: int  # non-special positions counted
    targets: int  # positions picked


@dataclass(frozen=True, kw_only=True)
class ExampleLoss:
    """An example's loss under a model, as training computes it (eval mode: no dropout). Lists run over the picked
    positions, in order."""

    positions: list[int]
    targets: list[str]  # the word piece each picked position must be guessed as
    target_probs: list[float]  # the model's probability of that piece
    top_guesses: list[str]  # its most likely piece there
    losses: list[float]  # -log(target_prob): each position's cross-entropy
    mlm_loss: float  # their mean
    is_next_prob: float  # the probability the NSP head gives "B follows A"
    nsp_loss: float  # -log of its probability for the example's true label
    nsp_weight: float  # the recipe's weight of the NSP loss
    loss: float  # mlm_loss + nsp_weight * nsp_loss: what training minimises


def corpus_sample(corpus: str, seed: int, count: int = SAMPLE_DOCUMENTS, length: int = SAMPLE_SENTENCES
                  ) -> Documents:
    """`count` passages of up to `length` consecutive sentences of a named corpus (or a mix), each from its own
    document, picked by `seed`, in corpus order."""
    documents, parts, sources = load_corpus(corpus), source_parts(corpus), document_sources(corpus)
    rng = random.Random(check_seed(seed))
    chosen = sorted(rng.sample(range(len(documents)), min(count, len(documents))))
    firsts = [rng.randrange(max(1, len(documents[i]) - length + 1)) for i in chosen]
    return Documents(documents=[documents[i][first:first + length] for i, first in zip(chosen, firsts)],
                     sources=[parts[sources[i]] for i in chosen],
                     numbers=[i - sources.index(sources[i]) for i in chosen], firsts=firsts)


def held_out_sample(recipe: TrainConfig, count: int = SAMPLE_DOCUMENTS, length: int = SAMPLE_SENTENCES
                    ) -> Documents | None:
    """The first `count` documents of the run's own validation split (`pretraining.split_corpus`: text it never
    trained on), up to `length` sentences each; None where the run trained on a visitor's file (not kept)."""
    if not is_named(recipe.corpus):
        return None
    _, (documents, sources) = split_corpus(recipe)
    names = source_parts(recipe.corpus)
    chosen = list(range(min(count, len(documents))))
    return Documents(documents=[documents[i][:length] for i in chosen],
                     sources=[f"{names[sources[i]]}, held out" for i in chosen], numbers=chosen,
                     firsts=[0] * len(chosen))


def typed_documents(text: str) -> Documents:
    """A visitor's paragraphs as documents, one each (a random B comes from another paragraph)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("type a few paragraphs, with a blank line between them")
    if len(text) > MAX_TYPED_CHARS:
        raise ValueError(f"the text is {len(text):,} characters; at most {MAX_TYPED_CHARS:,} are allowed")
    documents = to_documents(paragraphs(text))
    if len(documents) < 2:
        raise ValueError(f"type at least two paragraphs, with a blank line between them, each with a sentence of "
                         f"{MIN_WORDS} words or more: a random B comes from another paragraph than A's")
    return Documents(documents=documents, sources=["your text"] * len(documents), numbers=list(range(len(documents))),
                     firsts=[0] * len(documents))


def check_seed(seed: object) -> int:
    """A seed as a whole number in range, else a ValueError that says what is allowed."""
    return whole_number(seed, "the seed", 0, MAX_SEED)


def draw(source: Documents, tokenizer: BertTokenizerFast, recipe: TrainConfig, seed: int) -> PretrainingExample:
    """The first example training would draw with `seed` from these documents, under `recipe` (its sequence length,
    masking rate, most predictions and random B), batches of one."""
    seed = check_seed(seed)
    data = sentence_pairs(recipe, tokenized(source, tokenizer), SpecialIds.from_tokenizer(tokenizer), seed, 1,
                          first_step=0)
    batch, (origin,) = next(data.drawn(explain=True))
    fates = batch.pop("mlm_fates")[0].tolist()
    labels = batch["mlm_labels"][0].tolist()
    shown = batch["input_ids"][0].tolist()
    original = [label if label != IGNORE_INDEX else id_ for id_, label in zip(shown, labels)]
    return PretrainingExample(
        seed=seed, a=_segment(source, origin.document, origin.a_sentences),
        b=_segment(source, origin.b_document, origin.b_sentences),
        is_next=int(batch["nsp_labels"][0]) == IS_NEXT, pieces=tokenizer.convert_ids_to_tokens(original),
        shown=tokenizer.convert_ids_to_tokens(shown), input_ids=shown,
        token_type_ids=batch["token_type_ids"][0].tolist(),
        labels=labels, fates=fates, cut=origin.cut, batch=batch)


def shares(source: Documents, tokenizer: BertTokenizerFast, recipe: TrainConfig, draws: int = SHARE_DRAWS,
           seed: int = 0) -> Shares:
    """The shares of each choice over the first `draws` examples training would draw from these documents, in
    batches of SHARE_BATCH (a multiple of it is drawn: masking draws each example's picks on its own, whatever the
    batch)."""
    special = SpecialIds.from_tokenizer(tokenizer)
    data = sentence_pairs(recipe, tokenized(source, tokenizer), special, seed, SHARE_BATCH, first_step=0)
    fates, candidates, is_next, stream = torch.zeros(len(FATES), dtype=torch.long), 0, 0, data.drawn(explain=True)
    drawn = 0
    while drawn < draws:
        batch, _ = next(stream)
        fates += torch.bincount(batch["mlm_fates"].flatten().long(), minlength=len(FATES))
        candidates += int((~torch.isin(batch["input_ids"], torch.tensor(special.special))
                           | (batch["mlm_labels"] != IGNORE_INDEX)).sum())
        is_next += int((batch["nsp_labels"] == IS_NEXT).sum())
        drawn += len(batch["nsp_labels"])
    targets = int(fates[list(PICKED)].sum())
    return Shares(draws=drawn, picked=targets / candidates,
                  fates={FATES[f]: int(fates[f]) / max(targets, 1) for f in PICKED}, is_next=is_next / drawn,
                  mask_prob=recipe.mask_prob, mask_replace=recipe.mask_replace, candidates=candidates, targets=targets)


@torch.inference_mode()
def loss(model: BertForPreTraining, example: PretrainingExample, tokenizer: BertTokenizerFast,
         nsp_weight: float = 1.0) -> ExampleLoss:
    """The example's masked-LM loss (the mean cross-entropy over the picked positions only), its next-sentence loss,
    and their weighted sum, from the model's own forward pass in eval mode."""
    device = next(model.parameters()).device
    out = in_eval_mode(model)(**{name: tensor.to(device) for name, tensor in example.batch.items()})
    logits = out.mlm_logits.float()  # (N, V) at the picked positions, in order
    probs = logits.softmax(-1)
    losses = F.cross_entropy(logits, out.mlm_targets, reduction="none")
    target_probs = probs.gather(1, out.mlm_targets[:, None])[:, 0]
    is_next_prob = float(out.nsp_logits.float().softmax(-1)[0, IS_NEXT])
    return ExampleLoss(
        positions=example.picked, targets=tokenizer.convert_ids_to_tokens(out.mlm_targets.tolist()),
        target_probs=target_probs.tolist(), top_guesses=tokenizer.convert_ids_to_tokens(probs.argmax(-1).tolist()),
        losses=losses.tolist(), mlm_loss=float(out.mlm_loss), is_next_prob=is_next_prob,
        nsp_loss=float(out.nsp_loss), nsp_weight=nsp_weight, loss=float(out.mlm_loss + nsp_weight * out.nsp_loss))


def tokenized(source: Documents, tokenizer: BertTokenizerFast) -> Tokenized:
    """The documents' token ids, each with its source (an index of the source names, sorted), one to one: a sentence
    that makes no word piece is refused (training would drop it, and an origin would then point past it)."""
    names = sorted(set(source.sources))
    ids = tokenize_sourced(source.documents, [names.index(name) for name in source.sources], tokenizer)
    if [len(d) for d in ids.documents] != [len(d) for d in source.documents]:
        raise ValueError("a sentence makes no word piece (it holds no letter, digit or sign the tokenizer reads): "
                         "write it out, or leave it out")
    return ids


def _segment(source: Documents, document: int, sentences: tuple[int, int]) -> Segment:
    """A segment's sentences and place, from its origin."""
    return Segment(sentences=source.documents[document][sentences[0]:sentences[1]], source=source.sources[document],
                   document=source.numbers[document], first=source.firsts[document] + sentences[0])
