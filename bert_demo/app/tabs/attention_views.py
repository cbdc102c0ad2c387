"""What the Attention tab says: how to read a map (one head, a layer's, their average or rollout), and the neuron
view's explanation of a weight."""
from __future__ import annotations


def attention_caption(rows: int, cols: int, layers: int, heads: int, rollout: bool, source: str | None) -> str:
    """What the attention map shows: how many tokens, and how to read a row (`source`: "A" or "B" when the map
    keeps only one sentence's attention to the other)."""
    shown = f"{rows} tokens shown" if source is None else f"{rows} × {cols} tokens shown"
    reading = (f"Each row is one token of sentence {source} and shows how much of its attention goes to each token "
               "of the other sentence; rows no longer sum to 1: the rest went to its own sentence."
               if source else
               "Each row is one token (the query) and shows how it spreads its attention over the tokens (keys); "
               "rows sum to 1.")
    text = f"{shown}; the model has {layers} layers × {heads} heads. {reading}"
    if rollout:
        text += (" Rollout multiplies the head-averaged maps of layers 1 to this one, adding the residual "
                 "connection (Abnar & Zuidema 2020): how much each input token flows into each position.")
    return text + " The colour scale runs from 0 to the map's largest weight."


NEURON_VIEW = ("A head's weight from token *i* to token *j* is made from two vectors the layer computes from each "
               "token: *i*'s **query** and *j*'s **key**. Multiplied dimension by dimension and summed, divided by "
               "√(head size), they give a score; the softmax of the scores over all *j* gives the weights "
               "(Vaswani et al. 2017, §3.2.1). Red is positive, blue negative. A stripe down the middle panel, a "
               "dimension large for every key, adds the same to every score, and so changes no weight. On a phone, "
               "swipe the chart sideways.")
