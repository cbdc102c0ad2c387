"""What lies near a word: the nearest vocabulary tokens to its input embedding, or, in a sentence, the nearest
words of other sentences at the same layer.

A vector is only ever compared with vectors of the same space. An input embedding is compared with the embedding
table. A hidden state after layer l is compared with the hidden states after layer l of the words of `REFERENCE`,
everyday sentences written for this purpose, as exBERT compares a token with a corpus's tokens at one layer (Hoover
et al. 2020): "bank" in a river sentence should land near the riverbank sentences, not near a bank account. Tokens the
model (almost) never saw in training are left out of the table: their embeddings are still near their random start,
and a learner reads them ("又", "##¼") as a broken model. A token's masked-LM output bias tracks how often training
showed it (ours starts at the log of its frequency), so the rarest quarter by that bias is left out. And a few words
projected from the embedding space onto a plane (`embedding_projection`).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.config import whole_number
from bert_demo.inference import (
    check_top_k,
    echo,
    encode_pair,
    evaluating,
    read_text,
    single_token,
)
from bert_demo.model import BertForPreTraining

MAX_PROJECTED = 60  # words in one embedding projection: more is unreadable as a scatter plot
RARE_SHARE = 0.25  # the share of the vocabulary, rarest by output bias, never offered as a neighbour
REFERENCE = (  # written for this module: everyday English, with words that change meaning with their sentence
    "she sat on the bank of the river and watched the boats.",
    "he put his money in the bank on friday.",
    "the bank closed early because of the holiday.",
    "the children played by the river after school.",
    "we walked along the shore of the lake at sunset.",
    "the water of the stream was cold and clear.",
    "my sister works at a shop in the town centre.",
    "the shop sells bread, milk and fresh fruit.",
    "she drank a cup of tea before work.",
    "he made coffee for everyone in the office.",
    "the cat slept on the warm windowsill all afternoon.",
    "our dog barked at the postman every morning.",
    "the bark of the old oak tree was rough.",
    "the baseball player swung his bat at the ball.",
    "a bat flew out of the cave at night.",
    "in spring the trees in the park turn green.",
    "the spring in the old clock was broken.",
    "please turn on the light in the kitchen.",
    "the bag was light enough for a child to carry.",
    "he struck a match to light the candle.",
    "the football match ended in a draw.",
    "she wore a gold ring on her left hand.",
    "the phone began to ring in the middle of the night.",
    "the president spoke to the nation on television.",
    "the government announced new taxes on tuesday.",
    "the king and the queen lived in a large castle.",
    "paris is the capital and largest city of france.",
    "berlin is a city with a long history.",
    "the train to london leaves at nine o'clock.",
    "she drove her car to the station in the rain.",
    "the doctor told him to rest for a week.",
    "the teacher asked the students to read the book.",
    "they ate dinner at a small restaurant near the harbour.",
    "the soup was too hot to eat.",
    "it was raining, so he took his umbrella.",
    "the sun rose over the mountains at dawn.",
    "the war ended after four long years.",
    "the army marched across the border in winter.",
    "he wrote a letter to his mother every week.",
    "the company sold its computers all over the world.",
)


class Neighbour(NamedTuple):
    token: str
    sentence: str  # the reference sentence a word in context was found in; "" for a row of the embedding table
    similarity: float


def neighbours(model: BertForPreTraining, tokenizer: BertTokenizerFast, word: str, k: int = 10,
               text: str | None = None, layer: int = 0) -> list[Neighbour]:
    """The `k` nearest neighbours (cosine) of `word`: without `text`, other rows of the embedding table, leaving
    out the word itself, special tokens and the rarest tokens; with `text`, the words of the reference sentences at
    the same `layer` (0: after the embedding layer, L: the last) as the word's hidden state where it first occurs
    in the text."""
    check_top_k(k)
    token_id = single_token(tokenizer, word)
    if text is None:
        return _in_table(model, tokenizer, token_id, k)
    layers = model.config.num_hidden_layers
    whole_number(layer, "layer", 0, layers)
    batch = encode_pair(model, tokenizer, read_text(text, "the sentence", tokenizer))
    where = (batch["input_ids"][0] == token_id).nonzero()
    if not len(where):
        raise ValueError(f"{echo(word)} does not occur in the sentence: pick one of its words")
    with evaluating(model) as model:
        hidden, _ = model.bert(batch["input_ids"], batch["token_type_ids"], None, False)
    return _in_sentences(model, tokenizer, hidden[layer][0, int(where[0])], layer, k)


def _in_table(model: BertForPreTraining, tokenizer: BertTokenizerFast, token_id: int, k: int) -> list[Neighbour]:
    table = model.bert.embeddings.word_embeddings.weight  # (V, H)
    with torch.inference_mode():
        similarity = F.cosine_similarity(table.float(), table[token_id].float()[None], dim=-1)  # (V,)
        similarity[rare_tokens(model)] = -2
        similarity[tokenizer.all_special_ids] = -2  # never a neighbour
        similarity[token_id] = -2
        best, ids = similarity.topk(k)
    return [Neighbour(token, "", score) for token, score in
            zip(tokenizer.convert_ids_to_tokens(ids.tolist()), best.tolist())]


def rare_tokens(model: BertForPreTraining) -> Tensor:
    """The ids of the rarest RARE_SHARE of the vocabulary by masked-LM output bias, below its quantile (none for a
    model without a masked-LM head, such as a fine-tuned classifier)."""
    heads = getattr(model, "cls", None)
    if heads is None:
        return torch.zeros(0, dtype=torch.long)
    bias = heads.predictions.bias.detach().float()  # (V,)
    return (bias < torch.quantile(bias, RARE_SHARE)).nonzero().squeeze(1)  # ties at the line are kept


def _in_sentences(model: BertForPreTraining, tokenizer: BertTokenizerFast, vector: Tensor, layer: int, k: int
                  ) -> list[Neighbour]:
    """The words of the reference sentences whose hidden states after `layer` are nearest `vector` (one forward
    pass over all of them, padded: a few tens of milliseconds for the shipped model)."""
    device = next(model.parameters()).device
    ids, types, mask = _padded(tokenizer, REFERENCE, device)
    with evaluating(model) as model:
        hidden, _ = model.bert(ids, types, mask, False)
    states = hidden[layer].float()  # (S, T, H)
    real = mask.bool() & ~torch.isin(ids, torch.tensor(tokenizer.all_special_ids, device=device))  # words only
    similarity = F.cosine_similarity(states, vector.float()[None, None], dim=-1).masked_fill(~real, -2)  # (S, T)
    best, flat = similarity.flatten().topk(min(k, int(real.sum())))
    rows, columns = flat // ids.shape[1], flat % ids.shape[1]
    tokens = tokenizer.convert_ids_to_tokens(ids[rows, columns].tolist())
    return [Neighbour(token, REFERENCE[row], score)
            for token, row, score in zip(tokens, rows.tolist(), best.tolist())]


def _padded(tokenizer: BertTokenizerFast, sentences: tuple[str, ...] | list[str], device: torch.device
            ) -> tuple[Tensor, Tensor, Tensor]:
    """Sentences encoded one by one and padded here: ids, segments and attention mask, (S, T) each. Asking the
    tokenizer to pad would set padding on the tokenizer every visitor shares, under another visitor's question, whose
    batch would come out padded or ragged."""
    encoded = [tokenizer(sentence, return_token_type_ids=True) for sentence in sentences]
    width = max(len(e["input_ids"]) for e in encoded)

    def column(key: str, fill: int) -> Tensor:
        return torch.tensor([e[key] + [fill] * (width - len(e[key])) for e in encoded], device=device)

    return column("input_ids", tokenizer.pad_token_id), column("token_type_ids", 0), column("attention_mask", 0)


def embedding_projection(model: BertForPreTraining, tokenizer: BertTokenizerFast, words: list[str]
                         ) -> list[tuple[str, float, float]]:
    """Each word with its input embedding projected onto the words' first two principal components (PCA)."""
    if not isinstance(words, list) or not 3 <= len(words) <= MAX_PROJECTED:
        count = len(words) if isinstance(words, list) else words
        raise ValueError(f"give from 3 to {MAX_PROJECTED} words to project, got {echo(count)}")
    ids = [single_token(tokenizer, word) for word in words]
    with torch.inference_mode():
        vectors = model.bert.embeddings.word_embeddings.weight[ids].float().cpu()  # (W, H)
        centred = vectors - vectors.mean(dim=0)
        _, _, components = torch.linalg.svd(centred, full_matrices=False)  # rows: principal directions
        axes = components[:2]
        axes = axes * axes.gather(1, axes.abs().argmax(1, keepdim=True)).sign()  # fixed signs: the same plot each time
        xy = centred @ axes.T  # (W, 2)
    return [(word, float(x), float(y)) for word, (x, y) in zip(words, xy.tolist())]
