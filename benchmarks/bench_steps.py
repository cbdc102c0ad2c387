"""The Step by step tab's answers against Fill-mask's, on the shipped model, as the app computes them (issue 62: the
example and the forward pass answer a 128-token pair with small-english in under 1 s, p50 and p95; issue 70: the
training step in under 2 s, and the other new views in under 1 s).

Each call is the tab's handler itself, in this process, with its rendering (Markdown, HTML, the plotly figures and
their JSON, as gradio sends them): `pretraining_example` draws a new seed each call from `wiki` under the model's
recipe (a pair of 128 word pieces, most draws; the shares of its 1,000 draws are counted once and kept, as the app
keeps them, and the first call, which counts them, is timed apart); `forward_steps` takes a new 128-token pair each
call (a forward pass of its own) through every one of its 31 steps in turn, with every layer's view (a token's path,
the step in every layer and head), and again walks the steps of one pass (which the tab keeps, as it does while a
visitor presses Next); `training_step` takes one training step on a new seed's example each call, and `forward_steps,
gradient` shows a step's gradient of a new seed's example (a training step of its own, which the tab keeps for the
next steps); the reference is Fill-mask's handler on the same model (the page's own first answer). Calls interleaved
after a warm-up; p50 and p95 of N each.

    python benchmarks/bench_steps.py [--model checkpoints/small-english] [-n 40]
"""
from __future__ import annotations

import argparse
import time

import torch
from _common import cores, interleaved_times, ms, percentile, print_table

from bert_demo.app.state.registry import Registry
from bert_demo.app.tabs import fill, learning, steps
from bert_demo.inference import encode_input
from bert_demo.inspection.forward_steps import SPECS, STEP_NAMES

FILL = "the [MASK] of the united states is the head of state and the commander of the armed forces."
BOX = '<div class="ex-tok '  # a position of the example's input, as the page draws it
WORDS = ("the river rose after the spring rains and the boats waited in the harbour until the water calmed while "
         "fishermen mended their nets on the old stone quay and children watched from the bridge").split()


def pair_of(tokenizer, length: int) -> tuple[str, str]:
    """Two sentences whose pair, [CLS] A [SEP] B [SEP], is exactly `length` word pieces, a [MASK] in A."""
    words = [WORDS[i % len(WORDS)] for i in range(length)]
    for n in range(length, 0, -1):
        a, b = " ".join(["[MASK]", *words[:n // 2]]), " ".join(words[n // 2:n])
        if len(tokenizer(a.replace("[MASK]", tokenizer.mask_token), b)["input_ids"]) <= length:
            return a, b
    raise ValueError("no pair fits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="checkpoints/small-english")
    parser.add_argument("-n", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    registry = Registry(device="cpu", allow_hub=False)
    loaded = registry.catalog.load(args.model)
    a, b = pair_of(loaded.tokenizer, 128)
    tokens = encode_input(loaded.model, loaded.tokenizer, a, b)["input_ids"].shape[1]
    started = time.perf_counter()
    first = steps.pretraining_example(registry, args.model, "wiki", "", "model", 0)
    counting = time.perf_counter() - started
    seeds, index, lengths = iter(range(1, 10**6)), iter(range(10**6)), []

    def example() -> None:
        shown = steps.pretraining_example(registry, args.model, "wiki", "", "model", next(seeds))
        lengths.append(shown["ex_tokens"].count(BOX))

    with_gradient = [i for i, spec in enumerate(SPECS) if spec.gradient]
    heads = [(layer, head) for layer in range(1, loaded.model.config.num_hidden_layers + 1)
             for head in range(1, loaded.model.config.num_attention_heads + 1)]

    def forward() -> None:  # another input each call (its last word changed): a pass the tab has not kept
        i = next(index)
        shown = steps.forward_steps(registry, args.model, a, f"{b.rsplit(' ', 1)[0]} {WORDS[i % len(WORDS)]}",
                                    *heads[i % len(heads)], i % len(STEP_NAMES))
        shown["fw_plot"].to_json()

    def training_step() -> None:
        shown = learning.training_step(registry, args.model, "wiki", "", "model", next(seeds))
        for name in ("ts_flow", "ts_heads", "ts_params", "ts_losses"):
            shown[name].to_json()

    def gradient() -> None:  # a new example each call: its training step is taken for it
        i = next(index)
        shown = steps.forward_steps(registry, args.model, "", "", *heads[i % len(heads)],
                                    with_gradient[i % len(with_gradient)], reads="example", shows="gradient",
                                    seed=next(seeds))
        shown["fw_plot"].to_json()

    def walk() -> None:  # the next step of the same input: the tab's kept pass, the step's figure drawn
        shown = steps.forward_steps(registry, args.model, a, b, 1, 1, next(index) % len(STEP_NAMES))
        shown["fw_plot"].to_json()

    def fill_mask() -> None:
        fill.fill_mask(registry, args.model, FILL, 5)

    times = interleaved_times({"pretraining_example": example, "forward_steps": forward,
                               "forward_steps, next step": walk, "training_step": training_step,
                               "forward_steps, gradient": gradient, "fill_mask": fill_mask}, args.n, args.warmup)
    print(f"{args.model}, {torch.get_num_threads()} threads of {cores()} cores; forward_steps on a {tokens}-token "
          f"pair, each of its {len(STEP_NAMES)} steps in turn; pretraining_example from wiki, a new seed a call "
          f"(pairs of {min(lengths)}-{max(lengths)} word pieces, median {sorted(lengths)[len(lengths) // 2]}); "
          f"{args.n} interleaved calls each after {args.warmup} warm-up")
    reference = percentile(times["fill_mask"], 50)
    rows = [[name, ms(percentile(t, 50)), ms(percentile(t, 95)), f"{percentile(t, 50) / reference:.1f}"]
            for name, t in times.items()]
    print_table(["call", "p50 ms", "p95 ms", "p50 / fill_mask's"], rows)
    pieces = first["ex_tokens"].count(BOX)
    print(f"the first pretraining_example, which counts both recipes' shares over 1,000 draws: {ms(counting)} ms "
          f"({pieces} word pieces)")


if __name__ == "__main__":
    main()
