"""What the Step by step tab shows of one training step, in words: where the gradient starts, what the step changed,
the tied word embeddings' two parts, and the optimizer's update worked through. Facts in (`training_step.TrainingStep`),
Markdown out."""
from __future__ import annotations

from typing import Any

from bert_demo.app.tabs.steps_views import as_code
from bert_demo.app.text import rate
from bert_demo.data.masking import MARKED
from bert_demo.config import NSP_CLASSES
from bert_demo.training.settings import PAPER_SCALE



CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#ts-summary table, #ts-start table, #ts-tied table, #ts-adam table { display: block; overflow-x: auto; }
#ts-summary th, #ts-summary td, #ts-start th, #ts-start td, #ts-adam th, #ts-adam td, #ts-summary td *,
#ts-start td *, #ts-adam td * { white-space: nowrap; word-break: normal; }  /* a phone scrolls these tables */
#ts-summary td:first-child { white-space: normal; min-width: 9em; }  /* what a row measures may wrap */
#ts-adam td:first-child, #ts-adam td:first-child * { white-space: normal; word-break: break-all; min-width: 11em; }
#ts-flow .js-plotly-plot { min-width: 900px; }  /* a column a step of every layer: a phone scrolls them */
#ts-flow { overflow-x: auto !important; }
"""


def _tokens(tokenizer: Any, ids: list[int]) -> list[str]:
    return tokenizer.convert_ids_to_tokens(ids)


def start_markdown(step: Any, tokenizer: Any, fates: list[int]) -> str:
    """The gradient where it is born: at each picked position, ∂loss/∂scores = (softmax − one-hot) / N, read at the
    label's entry (p − 1: pushed up) and at the top guess's (p: pushed down); at the NSP head the same, times its
    weight."""
    guesses, n = step.before.guesses, len(step.before.guesses)
    labels = _tokens(tokenizer, [g.label for g in guesses])
    tops = _tokens(tokenizer, [g.top for g in guesses])
    lines = [f"The masked-LM loss is the mean of −log p(label) over the **{n} picked positions**, so at each one the "
             f"gradient of the loss with respect to the vocabulary's scores is **(softmax − one-hot) / {n}**: every "
             "word's probability, minus 1 at the label. Gradient descent moves the scores against it: the label's "
             "up, every other word's down in proportion to its probability.", "",
             "| position | label | p(label) | ∂loss/∂score(label) | top guess | its p | ∂loss/∂score(top) |",
             "|---|---|---|---|---|---|---|"]
    for g, label, top in zip(guesses, labels, tops):
        top_cell = (f"{as_code(top)} (the label) | {g.top_prob:.3f} | (the same)" if g.top == g.label
                    else f"{as_code(top)} | {g.top_prob:.3f} | +{g.top_prob / n:.2e}")
        lines.append(f"| {g.position}{MARKED.get(fates[g.position], '')} | {as_code(label)} | {g.label_prob:.3f} | "
                     f"{(g.label_prob - 1) / n:+.2e} | "
                     f"{top_cell} |")
    nsp = step.nsp_start.tolist()
    label = next(i for i, value in enumerate(nsp) if value < 0)
    weight = "" if step.nsp_weight == 1 else f" × the recipe's NSP weight {step.nsp_weight:g}"
    lines += ["", f"**At the NSP head** the label is {NSP_CLASSES[label]}: softmax − one-hot = "
                  f"({nsp[0]:+.4f}, {nsp[1]:+.4f}) for ({', '.join(NSP_CLASSES)}){weight}. Both gradients then travel "
                  "back through the same network: the masked words' from their positions, the pair's from [CLS]."]
    return "\n".join(lines)


def summary_markdown(step: Any, tokenizer: Any, model: str, probe_text: str, fates: list[int]) -> str:
    """Before and after: the example's loss, each picked position's probability of its label and its top guess, the
    NSP label's probability, and an unrelated sentence's guesses."""
    before, after, taken = step.before, step.after, len(step.losses) - 1
    steps = "one step" if taken == 1 else f"{taken} steps"
    dropout = (f"with dropout {step.dropout:g} in the step (the losses here are measured without it)" if step.dropout
               else "without dropout, so that the step repeats number for number (the paper trains with 0.1)")
    lines = [f"**{steps.capitalize()}** of {step.optimizer} on this example, on a private copy of **{model}** "
             f"(the model the app answers with is untouched), {dropout}.", "",
             f"| | before | after {steps} |", "|---|---|---|",
             f"| **the loss training minimises** | {before.loss:.4f} | {after.loss:.4f} |",
             f"| masked-LM loss | {before.mlm_loss:.4f} | {after.mlm_loss:.4f} |",
             f"| next-sentence loss | {before.nsp_loss:.4f} | {after.nsp_loss:.4f} |",
             f"| p(the pair's own NSP label) | {before.nsp_prob:.3f} | {after.nsp_prob:.3f} |"]
    moves = step.moves
    lines += ["", f"A fresh {step.optimizer}'s first step at the recipe's peak learning rate, {rate(step.lr)}, moved "
                  f"{moves.over_half / moves.weights:.1%} of the weights by more than half of it (below): a big step, "
                  "made on this one example, so it learns it at once. In a run, each step is made on a batch of many "
                  "examples, after a warm-up."]
    lines += ["", "| position | label | p(label) before → after | top guess before → after |", "|---|---|---|---|"]
    for g, h in zip(before.guesses, after.guesses):
        label, top, top_after = _tokens(tokenizer, [g.label, g.top, h.top])
        lines.append(f"| {g.position}{MARKED.get(fates[g.position], '')} | {as_code(label)} | {g.label_prob:.3f} → "
                     f"**{h.label_prob:.3f}** | "
                     f"{as_code(top)} {g.top_prob:.2f} → {as_code(top_after)} {h.top_prob:.2f} |")
    if before.probe and after.probe_logits is not None:
        word, p_before = before.probe[0]
        p_after = float(after.probe_logits.softmax(-1)[word])
        new, p_new = after.probe[0]
        lines += ["", f"**Everything moves.** An unrelated sentence, Fill-mask's first: {as_code(probe_text)}. Its top "
                      f"guess was {as_code(_tokens(tokenizer, [word])[0])} at {p_before:.3f}; after, that word has "
                      f"{p_after:.3f}, and the top guess is {as_code(_tokens(tokenizer, [new])[0])} at {p_new:.3f}. "
                      "No weight belongs to one sentence: a step on one example shifts the answers to all."]
    return "\n".join(lines)


def parts_markdown(norms: list[tuple[str, str, float]], step: Any, gain: Any) -> str:
    """Which part's gradient is the largest and how much of the whole it is (and so whether it sets the clipping),
    and how the embeddings' LayerNorm scales the gradient on its way into the tables, all measured on this step."""
    group, part, largest = max(norms, key=lambda row: row[2])
    clipping = (f", so it is what sets the clipping factor, {step.clipped:.3g}" if step.clipped < 1
                and largest > step.grad_norm / 2 else "")
    change = "grows" if gain.ratio >= 1 else "shrinks"
    return (f"**The largest part's gradient is {group} · {part}**: {largest:.3g} of the whole gradient's "
            f"{step.grad_norm:.3g} (L2 norms){clipping}. **Through the embeddings' LayerNorm the gradient {change} "
            f"{gain.ratio:.3g}×** on its way down into the three tables: LayerNorm divides its input, the sum of a "
            f"token's word, position and segment rows, by its standard deviation σ, here {gain.sigma:.3g} on "
            f"average, and multiplies it by γ, here {gain.gamma:.3g} on average, so its backward pass scales the "
            f"gradient by about γ/σ = {gain.gamma / gain.sigma:.3g} (and removes its mean). The segment table has "
            "two rows, each the sum of the gradients of every token of its sentence: a few rows that every token "
            "reaches take a large gradient.")


def tied_markdown(step: Any) -> str:
    """The word-embedding table's two parts: from the input lookup (rows of the words read only) and from the
    masked-LM decoder (every row: every word's score was pushed), and their sum, the table's gradient."""
    lookup, decoder = step.tied_parts
    total = lookup + decoder
    rows_read = int((lookup.abs().sum(-1) > 0).sum())
    rows_decoded = int((decoder.abs().sum(-1) > 0).sum())
    gap = float((total - step.gradients["bert.embeddings.word_embeddings.weight"]).abs().max())
    return "\n".join([
        "**The word embeddings are tied** (§3, as in the released code): one table is both the input's lookup and "
        "the masked-LM decoder's weights, so its gradient has two parts, each measured by autograd:", "",
        "| part | size (L2) | rows it reaches |", "|---|---|---|",
        f"| from the input: the lookup of each word read | {float(lookup.norm()):.3g} | {rows_read:,}: the words "
        "of this example |",
        f"| from the decoder: every word's score | {float(decoder.norm()):.3g} | {rows_decoded:,} of "
        f"{len(decoder):,}: every word the softmax gave a probability |",
        f"| **their sum: the table's gradient** | {float(total.norm()):.3g}: the size of the sum, not the two "
        "sizes added | |", "",
        f"The sum equals the gradient autograd accumulated in the table itself to within {gap:.1e}.",
    ])


def adam_markdown(step: Any, paper: bool) -> str:
    """The optimizer's settings (`paper`: the example was drawn under the paper's recipe, whose learning rate was
    BERT-Base's), the clipping, the update of a few weights worked through with the real optimizer's own m and v,
    what the first step did to every weight (measured), and each worked weight's move at every step taken."""
    lines = [_settings(step, paper), "", *FORMULAS]
    if step.optimizer == "LAMB":
        lines += ["", "LAMB then rescales each matrix's step (its weight decay included) by the matrix's trust ratio, "
                      "‖w‖ / ‖step‖ (You et al. 2020): the Δw below are LAMB's, not the formula's alone."]
    lines += ["", "| weight | w | g (clipped) | m | v | m̂ | v̂ | Δw | Δw / lr | w after |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for w in step.worked:
        lines.append(f"| `{w.name}[{', '.join(map(str, w.index))}]` | {w.weight_before:.5g} | {w.gradient:.3g} | "
                     f"{w.m:.3g} | {w.v:.3g} | {w.m_hat:.3g} | {w.v_hat:.3g} | **{w.update:+.3g}** | "
                     f"{w.update / step.lr:+.3f} | {w.weight_after:.5g} |")
    lines += ["", _first_step(step), "", moves_markdown(step.moves)]
    if len(step.trail[0]) > 1:
        lines += ["", trail_markdown(step)]
    return "\n".join(lines)


FORMULAS = [r"$$ m \leftarrow \beta_1 m + (1-\beta_1)\,g $$", "",
            r"$$ v \leftarrow \beta_2 v + (1-\beta_2)\,g^2 $$", "",
            r"$$ \hat m = \frac{m}{1-\beta_1^t},\qquad \hat v = \frac{v}{1-\beta_2^t} $$", "",
            r"$$ w \leftarrow w - \mathrm{lr}\cdot\mathrm{wd}\cdot w - \mathrm{lr}\,\frac{\hat m}{\sqrt{\hat v}+"
            r"\epsilon} $$"]


def _settings(step: Any, paper: bool) -> str:
    """The optimizer, its settings, where its learning rate comes from, and the clipping."""
    beta1, beta2 = step.betas
    why = (f"this model's own peak rate: the paper's {rate(PAPER_SCALE['lr'])} was BERT-Base's, with batches of "
           f"{PAPER_SCALE['batch_size']} sequences, and a rate goes with a model's size and batch, so this step "
           "keeps the model's" if paper else "the peak of the recipe this model was trained with: a run warms up to it")
    clipped = (f"The gradient's size was **{step.grad_norm:.3g}**, above the recipe's clip of {step.grad_clip:g}: "
               f"every gradient was multiplied by **{step.clipped:.3g}** first." if step.clipped < 1 else
               f"The gradient's size was {step.grad_norm:.3g}, within the recipe's clip of {step.grad_clip:g}: "
               "no clipping.")
    return (f"**{step.optimizer}**, as the recipe makes it for a run: learning rate **{rate(step.lr)}** ({why}), "
            f"β1 = {beta1:g}, β2 = {beta2:g}, ε = {rate(step.eps)}, weight decay {step.weight_decay:g} on matrices. "
            + clipped)


def _first_step(step: Any) -> str:
    """What a first step of Adam does to a weight, said of the worked weights' own numbers."""
    if step.optimizer == "LAMB":
        return ("**LAMB's first step**: with no history, m̂ / √v̂ is the sign of each gradient, as in Adam; the trust "
                "ratio then scales each matrix's step to its own size.")
    alike = [w for w in step.worked if abs(w.gradient) > step.eps]
    small = [w for w in step.worked if abs(w.gradient) <= step.eps]
    said = ["**What Adam's first step does:** with no history, m̂ = g and v̂ = g², so each weight moves by "
            "lr · g / (|g| + ε), against its gradient's sign: about the learning rate wherever |g| is well above ε, "
            "whatever its size, and less than half of it where |g| is under ε."]
    if len(alike) > 1:
        said.append(f"The first two weights above have gradients {abs(alike[0].gradient / alike[1].gradient):,.0f} "
                    f"times apart and move alike ({alike[0].update / step.lr:+.3f} and "
                    f"{alike[1].update / step.lr:+.3f} of the rate).")
    if small:
        w = small[0]
        said.append(f"The last one's gradient, {abs(w.gradient):.2g}, is under ε = {rate(step.eps)}: it moved by "
                    f"{abs(w.update) / step.lr:.1%} of the rate.")
    said.append("That is why a run warms up: its first steps take a small share of the peak rate while m and v "
                "gather a history; later, m̂ / √v̂ is an average direction rather than a sign.")
    return " ".join(said)


def moves_markdown(moves: Any) -> str:
    """What the first step did to every weight, counted: how many moved by more than half the learning rate, the
    median move, and why the others moved less (no gradient, or one under ε, clipping's doing or not)."""
    share = moves.over_half / moves.weights
    lines = [f"**Measured over all {moves.weights:,} weights of this step:** {share:.1%} moved by more than half the "
             f"learning rate; the median move was {moves.median:.1%} of it."]
    if moves.under_eps:
        by_clipping = (f" ({moves.under_eps_by_clipping:,} of them were above ε before clipping multiplied every "
                       f"gradient by {moves.clipped:.3g})" if moves.under_eps_by_clipping else "")
        lines[0] += (f" {moves.under_eps / moves.weights:.1%} read a gradient under ε = {rate(moves.eps)}"
                     f"{by_clipping}: their step is at most half the rate.")
    if moves.no_gradient:
        most = max(moves.parts, key=lambda part: part.no_gradient)
        lines[0] += (f" {moves.no_gradient / moves.weights:.1%} got no gradient at all, {most.no_gradient:,} of them "
                     f"in {most.part}{NO_GRADIENT_WHY.get(most.part, '')}: they move by weight decay alone, if at "
                     "all.")
    lines += ["", "| part | weights | moved > lr/2 | g = 0 | 0 < g ≤ ε | of those, > ε before clipping |",
              "|---|---|---|---|---|---|"]
    for part in moves.parts:
        lines.append(f"| {part.part} | {part.weights:,} | {part.over_half / part.weights:.1%} | "
                     f"{part.no_gradient:,} | {part.under_eps:,} | {part.under_eps_by_clipping:,} |")
    return "\n".join(lines)


NO_GRADIENT_WHY = {"embeddings · position embeddings": " (the rows of positions past this example's length)"}


def trail_markdown(step: Any) -> str:
    """Each worked weight's move at every step taken on the example: Adam's step with a history (LAMB's: Adam's,
    rescaled by the matrix's trust ratio)."""
    names = [f"`{w.name.rsplit('.', 2)[-2]}[{', '.join(map(str, w.index))}]`" for w in step.worked]
    lamb = step.optimizer == "LAMB"
    rule = "lr · m̂ / (√v̂ + ε)" + (", in a matrix rescaled by the matrix's trust ratio (LAMB's)" if lamb else "")
    steady = "the same share of the rate" if lamb else "the rate"
    lines = ["**Step after step** on the same example, each weight's move (its value after minus before), as a share "
             f"of the learning rate: each step is {rule}, m̂ an average of the gradients so far and √v̂ their typical "
             f"size, so a weight whose gradient keeps its sign keeps moving by about {steady}, and one whose gradient "
             "shrinks or turns moves less.", "",
             "| step | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for number, moves in enumerate(zip(*step.trail), start=1):
        lines.append(f"| {number} | " + " | ".join(f"{move / step.lr:+.3f}" for move in moves) + " |")
    return "\n".join(lines)


FLOW_NOTE = ("Each column is a step of the forward pass, each row a token; the colour is the size of the loss's "
             "gradient there, on a log scale, and blank means none reaches it. Read it from the left, as the gradient "
             "travels: it is born at the picked positions (the masked-LM head) and at [CLS] (the NSP head). In the "
             "last layer only those positions get any: the feed-forward network works on each token alone. "
             "Attention's keys and values pass it to every other token, and each layer's residual connections carry "
             "it down to the embeddings, where the word, position and segment rows, added up, share one gradient.")
HEADS_NOTE = ("How much of the learning signal reaches each head: the size of the gradient at its output (its "
              "weighted sum of V), over every token.")
PARAMS_NOTE = ("Each part's gradient, weights and biases together, in the order of the forward pass. These are "
               "what `loss.backward()` leaves in each parameter's `.grad`, before clipping.")


def no_timeline(label: str) -> str:
    """Why there is nothing to follow for a model without snapshots."""
    return (f"**{label}** kept no snapshots of its training (the shipped models were trained on a GPU elsewhere), "
            "so there is nothing to follow. A run trained in the Train tab keeps snapshots at steps 0, 10, 30, 100, "
            "300, ...: select it above, and follow this example through it.")


def across_markdown(moments: list[Any], labels: list[str], model: str) -> str:
    """What the chart of the example across training shows, with its first and last numbers."""
    first, last = moments[0], moments[-1]
    tops = [sum(rank == 1 for rank in m.ranks) for m in (first, last)]
    return (f"This example under **{model}**'s weights at each step its run kept, from step {first.step} to "
            f"{last.step}: its loss went from **{first.loss:.3f}** to **{last.loss:.3f}**, and the labels guessed "
            f"first from {tops[0]} of {len(labels)} to {tops[1]}. Left: the loss; right: each picked position's "
            "label's rank among the model's guesses (1: its top guess).")
