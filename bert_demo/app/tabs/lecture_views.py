"""What the Step by step tab's fourth section shows, in words: a step on a batch beside a step on one example, a
weight's gradient worked by hand, Adam over a short run beside SGD, and the gradient through the depth across a run.
Facts in (`batch_step`, `by_hand`, `over_time`, `across_training`), Markdown out; every claim is read from them."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bert_demo.app.tabs.steps_views import as_code
from bert_demo.app.text import rate
from bert_demo.config import IS_NEXT, NOT_NEXT, NSP_CLASSES

CSS = """  /* this section's rules of the page's style sheet (ui.CSS) */
#lc-batch table, #lc-hand table, #lc-adam table, #lc-depth table { display: block; overflow-x: auto; }
#lc-batch td, #lc-hand td, #lc-adam td, #lc-batch th, #lc-hand th, #lc-adam th { white-space: nowrap; }
"""


def _nsp(is_next: bool) -> str:
    return NSP_CLASSES[IS_NEXT if is_next else NOT_NEXT]


def _weight(name: str, index: Sequence[int]) -> str:
    return f"{as_code(name.removeprefix('bert.'))}{list(index)}"


def batch_markdown(step: Any) -> str:
    """A step on a batch against a step on its first example alone: each example's share and angle, each one's loss
    before and after both steps, a few weights' gradients as the sum of the examples' parts, then dropout's noise and
    accumulation's equality."""
    examples, n = step.examples, step.size
    first = examples[0]
    by_batch, alone = first.loss_before - first.loss_after_batch, first.loss_before - first.loss_after_alone
    others = examples[1:]
    helped = sum(e.loss_after_alone < e.loss_before for e in others)
    lines = [f"The example above and the next **{n - 1}** the trainer's stream draws after it, as one batch (the "
             "paper's held 256 sequences, Appendix A.2). The "
             f"masked-LM loss is the mean over all **{sum(e.targets for e in examples)}** picked positions of the "
             f"batch, the NSP loss the mean over its {n} pairs, so example i's part of the batch's gradient is "
             f"(its picked positions ÷ the batch's) × its masked-LM gradient + ({step.nsp_weight:g} ÷ {n}) × its NSP "
             "gradient. One fresh optimizer step at the recipe's peak rate, "
             f"{rate(step.lr)}, on the batch, and another on example 1 alone:", "",
             "| example | NSP label | picked | share of the MLM loss | cos(its gradient, batch's) | "
             "loss before | after the batch's step | after a step on ex. 1 alone |",
             "|---|---|---|---|---|---|---|---|"]
    for i, e in enumerate(examples, 1):
        lines.append(f"| {i}{' (above)' if i == 1 else ''} | {_nsp(e.is_next)} | {e.targets} | {e.share:.1%} | "
                     f"{e.cosine:+.3f} | {e.loss_before:.4f} | {e.loss_after_batch:.4f} | {e.loss_after_alone:.4f} |")
    lines += ["", f"The batch's step lowered example 1's loss by **{by_batch:+.4f}**, its own step by "
                  f"**{alone:+.4f}**: a batch's gradient points where the examples agree, "
                  f"{'less' if by_batch < alone else 'not less'} towards any one of them. The step on example 1 alone "
                  f"lowered the loss of {helped} of the other {n - 1}. Its gradient's size alone is "
                  f"{step.alone_norm:.3g}, the batch's {step.batch_norm:.3g} (before clipping).", ""]
    header = " | ".join(f"ex. {i}" for i in range(1, n + 1))
    lines += [f"| weight | {header} | sum of the parts | the batch's gradient (autograd) |",
              "|---|" + "---|" * (n + 2)]
    for w in step.weights:
        lines.append(f"| {_weight(w.name, w.index)} | " + " | ".join(f"{p:+.3e}" for p in w.parts)
                     + f" | {sum(w.parts):+.4e} | {w.batch:+.4e} |")
    return "\n".join([*lines, "", dropout_markdown(step.dropout), "", accumulation_markdown(step.accumulation)])


def dropout_markdown(dropout: Any) -> str:
    changes = ", ".join(f"{c:.1%}" for c in dropout.change)
    return (f"**Dropout.** The same batch's gradient with the paper's dropout {dropout.rate:g} (a new random mask "
            f"each pass) against none: it changed by {changes} of its size in {len(dropout.change)} draws "
            f"(cosine with the gradient without dropout {min(dropout.cosine):.3f} to {max(dropout.cosine):.3f}), "
            f"and two draws agree to a cosine of {dropout.between:.3f}. Dropout adds noise of its own to every "
            "step, beside the noise of which examples the batch holds. The steps above are taken without it, so "
            "that they repeat number for number.")


def accumulation_markdown(accumulation: Any) -> str:
    k = accumulation.micro_batches
    return (f"**Gradient accumulation.** The parts above are the batch taken as {k} micro-batches of one example, "
            "each's loss weighted as the trainer weights a micro-batch (its share of the batch's picked positions; "
            f"the NSP loss ÷ {k}), their gradients summed as `loss.backward()` sums them: over every weight they "
            f"differ from one pass over the whole batch by at most **{accumulation.difference:.1e}**, against a "
            f"largest gradient of {accumulation.largest:.3g} (float32 rounding). A batch too big for memory is taken "
            "in parts, and the step is the same.")


def hand_markdown(work: Any, rows: Sequence[str], decoder_rows: Sequence[str]) -> str:
    """The three worked gradients: `rows` names each token of the example, `decoder_rows` each picked position."""
    return "\n\n".join([linear_markdown(work.linear, decoder_rows if work.linear.module.startswith("cls.")
                                        else rows), softmax_markdown(work.softmax, rows),
                        layer_norm_markdown(work.layer_norm, rows)])


def linear_markdown(linear: Any, rows: Sequence[str]) -> str:
    """dW[i, j] = Σ_t δ[t, i] x[t, j], the largest terms listed."""
    from bert_demo.inspection.by_hand import shown_terms

    i, j = linear.index
    products = [d * x for d, x in zip(linear.delta, linear.x)]
    shown = shown_terms(products)
    rest = sum(p for t, p in enumerate(products) if t not in shown)
    lines = [f"**A linear layer's weight: {as_code(linear.module.removeprefix('bert.'))}.weight[{i}, {j}]**, the one "
             "with the largest gradient. The layer computes y = x Wᵀ + b for every row, so W[i, j] reaches the loss "
             f"through output {i} of every row: ∂loss/∂W[i, j] = Σ over rows t of δ[t, {i}] · x[t, {j}], the "
             "gradient arriving at the output times the input (dW = δᵀx). A row whose input or output gradient is "
             "near zero teaches this weight nothing.", "",
             f"| row | x[t, {j}] (its input) | δ[t, {i}] (the gradient at its output) | their product |",
             "|---|---|---|---|"]
    lines += [f"| {as_code(rows[t])} | {linear.x[t]:+.4f} | {linear.delta[t]:+.3e} | {products[t]:+.3e} |"
              for t in shown]
    if len(products) > len(shown):
        lines.append(f"| the other {len(products) - len(shown)} rows | | | {rest:+.3e} |")
    lines += [f"| **the sum, by hand** | | | **{linear.by_hand:+.6e}** |",
              f"| **autograd's** | | | **{linear.autograd:+.6e}** |"]
    return "\n".join(lines)


def softmax_markdown(softmax: Any, rows: Sequence[str]) -> str:
    """A row of attention softmax's backward pass: ds = p ⊙ (dp − p·dp)."""
    from bert_demo.inspection.by_hand import shown_terms

    shown = shown_terms(softmax.autograd)
    error = max(abs(a - b) for a, b in zip(softmax.by_hand, softmax.autograd))
    lines = [f"**A row of softmax:** layer {softmax.layer}, head {softmax.head}, the query "
             f"{as_code(rows[softmax.query])} (the row whose gradient is largest). p = softmax(s) over the keys, so "
             "∂p_k/∂s_j = p_k (1[k = j] − p_j), the matrix diag(p) − ppᵀ, and ∂loss/∂s = p ⊙ (∂loss/∂p − p·∂loss/∂p): "
             f"a key's score is pushed up where its ∂loss/∂p is below the average p·∂loss/∂p = "
             f"{softmax.p_dot_dp:+.3e}, and a key the query ignores (p ≈ 0) gets no gradient at all.", "",
             "| key | p | ∂loss/∂p | ∂loss/∂p − p·∂loss/∂p | ∂loss/∂s by hand | autograd's |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {as_code(rows[k])} | {softmax.p[k]:.4f} | {softmax.dp[k]:+.3e} | "
              f"{softmax.dp[k] - softmax.p_dot_dp:+.3e} | {softmax.by_hand[k]:+.3e} | {softmax.autograd[k]:+.3e} |"
              for k in shown]
    lines += ["", f"Over all {len(softmax.p)} keys the two agree to within {error:.1e}; the gradients sum to "
                  f"{sum(softmax.by_hand):+.1e} (softmax ignores a shift of every score)."]
    return "\n".join(lines)


def layer_norm_markdown(norm: Any, rows: Sequence[str]) -> str:
    """A row of LayerNorm's backward pass."""
    from bert_demo.inspection.by_hand import shown_terms

    shown = sorted(shown_terms(norm.autograd, 6))
    error = max(abs(a - b) for a, b in zip(norm.by_hand, norm.autograd))
    lines = [f"**A row of LayerNorm:** {as_code(norm.module.removeprefix('bert.'))} at "
             f"{as_code(rows[norm.token])} (the token whose gradient there is largest). y = γ ⊙ x̂ + β with "
             "x̂ = (x − mean x) / σ, so with g = γ ⊙ ∂loss/∂y: ∂loss/∂x = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / σ. Here "
             f"σ = {norm.sigma:.4f}, mean |γ| = {norm.gamma:.3f}, mean(g) = {norm.mean_g:+.3e}, mean(g ⊙ x̂) = "
             f"{norm.mean_gx:+.3e}.", "",
             "| unit | ∂loss/∂y | ∂loss/∂x by hand | autograd's |", "|---|---|---|---|"]
    lines += [f"| {d} | {norm.dy[d]:+.3e} | {norm.by_hand[d]:+.3e} | {norm.autograd[d]:+.3e} |" for d in shown]
    lines += ["", f"Over all {len(norm.dy)} units they agree to within {error:.1e}. The gradient leaves this row "
                  f"**{norm.gain:.2f}×** its size on arrival, near mean |γ| / σ = {norm.gamma / norm.sigma:.2f}: "
                  "LayerNorm divides by σ on the way up, so the gradient is multiplied by γ/σ on the way down, with "
                  f"its mean (here {statistics.fmean(norm.by_hand):+.1e}) and its part along x̂ removed."]
    return "\n".join(lines)


def adam_markdown(run: Any) -> str:
    """The run's steps, then the first traced weight step by step, the recipe's optimizer (AdamW, or LAMB: Adam's
    step rescaled by each matrix's trust ratio) beside SGD, with what differs."""
    steps = len(run.rates)
    lines = [f"**{steps} steps of {run.optimizer}** on the trainer's batches of {run.batch_size}, with the "
             f"trainer's schedule for a run of {steps} steps (a warm-up, then a linear decay to 0; peak "
             f"{rate(run.peak_lr)}, the paper's 1e-4 over 1,000,000 steps of 256 sequences) and its clipping, on a "
             "private copy, no dropout.", "",
             "| step | learning rate | share of the peak | the batch's loss | gradient norm | clipped by | "
             "weights moved over half the rate |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {t} | {rate(r)} | {r / run.peak_lr:.0%} | {loss:.4f} | {norm:.3g} | ×{clip:.3g} | {moved:.1%} |"
              for t, (r, loss, norm, clip, moved) in enumerate(zip(run.rates, run.losses, run.grad_norms, run.clipped,
                                                                   run.over_half), 1)]
    trace = run.traces[0]
    b1, b2 = run.betas
    lines += ["", f"**One weight, {_weight(trace.name, trace.index)}**, step by step: m = {b1:g}·m + {1 - b1:.1g}·g, "
                  f"v = {b2:g}·v + {1 - b2:.3g}·g², m̂ = m/(1−{b1:g}ᵗ), v̂ = v/(1−{b2:g}ᵗ), and {_rule(run)}; SGD by "
                  f"−rate·g, with momentum −rate·b, b = {run.momentum:g}·b + g.", "",
              f"| t | g (clipped) | m | v | m̂ | v̂ | m̂/(√v̂+ε) | {run.optimizer}'s move | SGD's | SGD with "
              "momentum's |", "|---|---|---|---|---|---|---|---|---|---|"]
    for t in range(steps):
        ratio = trace.m_hat[t] / (math.sqrt(trace.v_hat[t]) + run.eps)
        lines.append(f"| {t + 1} | {trace.gradient[t]:+.3e} | {trace.m[t]:+.3e} | {trace.v[t]:.3e} | "
                     f"{trace.m_hat[t]:+.3e} | {trace.v_hat[t]:.3e} | {ratio:+.3f} | {trace.move[t]:+.3e} | "
                     f"{trace.sgd[t]:+.3e} | {trace.sgd_momentum[t]:+.3e} |")
    return "\n".join([*lines, "", adam_against_sgd(run)])


def _rule(run: Any) -> str:
    """How the recipe's optimizer moves a weight, in words."""
    if run.optimizer == "LAMB":
        return ("LAMB moves it by −rate·r·(m̂/(√v̂ + ε) + the weight decay), r its matrix's trust ratio ‖w‖ / ‖that "
                "step‖ (You et al. 2020)")
    return f"{run.optimizer} moves it by −rate·m̂/(√v̂ + ε) (and the weight decay)"


def adam_against_sgd(run: Any) -> str:
    """Where the recipe's optimizer and SGD differ, measured over the traced weights."""
    name, sentences, ratios = run.optimizer, [], []
    for trace in run.traces:
        adam = statistics.median(abs(m) for m in trace.move)
        sgd = statistics.median(abs(m) for m in trace.sgd)
        gradient = statistics.median(abs(g) for g in trace.gradient)
        times = f"{_times(adam / sgd)} times SGD's" if sgd > 0 else "where SGD's is 0"
        ratios += [adam / sgd] if sgd > 0 else []
        sentences.append(f"{_weight(trace.name, trace.index)} (median |g| {gradient:.2e}): {name}'s median move "
                         f"{adam:.2e}, {times}")
    first = run.traces[0]
    ratios_first = [m / (math.sqrt(v) + run.eps) for m, v in zip(first.m_hat, first.v_hat)]
    scaled = " times its matrix's trust ratio" if name == "LAMB" else ""
    return (f"**{name} against SGD, with the same gradients and rates.** " + "; ".join(sentences) + f". {name} moves "
            f"a weight by the rate{scaled} times m̂/(√v̂ + ε): its recent gradients' mean over their size, ±1 at the "
            "first step whatever the gradient's size (less where it is under ε), then smaller where the gradient "
            f"changes sign from step to step, which m averages away (the first weight's: {ratios_first[0]:+.3f} at "
            f"step 1, {ratios_first[-1]:+.3f} at step {len(ratios_first)}). SGD's step is the gradient times the "
            "rate, so after clipping it barely moves most weights at a rate this size."
            + (f" To match {name}, SGD's rate would have to be {_times(min(ratios))} to {_times(max(ratios))} times "
               "larger for these weights: no one rate fits them all." if len(ratios) > 1 else ""))


def _times(ratio: float) -> str:
    """A ratio as a reader reads it: 7.78, 56.5, 1,234, 2,050,000."""
    return f"{ratio:,.0f}" if ratio >= 1000 else f"{ratio:.3g}"


def depth_markdown(depths: Sequence[Any], model: str, examples: int, held_out: bool) -> str:
    """What the chart of the gradient through the depth shows, from its numbers; `held_out`: whether its batch came
    from the run's held-out documents."""
    first, last = depths[0], depths[-1]
    batch = ("the run's held-out documents, text it never trained on" if held_out else
             "the passages section 1 draws from (this run's held-out text is not at hand: a visitor's file, or a "
             "corpus the app does not train on)")

    def ratio(depth: Any) -> float:
        return depth.at_outputs[0] / max(depth.at_outputs[-1], 1e-30)

    return (f"The gradient of one fixed batch's loss ({examples} examples the trainer draws from {batch}) at each "
            f"depth of **{model}**, under the weights of every step its run kept, from the last layer's output down to "
            f"the embeddings' output. At step {first.step} the embeddings' output gets **{ratio(first):.3g}×** the "
            f"gradient at the last layer's; at step {last.step}, **{ratio(last):.3g}×** (the batch's loss "
            f"{first.loss:.3f} → {last.loss:.3f}). Above 1 the gradient grows on its way down, below 1 it fades. "
            "Above: its size at each layer's output, a line a step; below: the size of each layer's weights' "
            "gradient.")
