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

With `--lecture`, the fourth section's views instead (issue 80: each within 5 s, p50 and p95): `batch_step` on a
batch of the most examples allowed (LESSON_BATCH) and `adam_over_time` at its most examples (10 steps of 4), each a
new seed a call; `by_hand` on a new seed, part and layer each call; and `depth_across_training` on a copy of the model
with two timeline snapshots of its own weights (what a BERT-Small run in the app keeps under its 128 MB budget; the
work does not depend on the weights' values); Fill-mask beside them.

    python benchmarks/bench_steps.py --lecture [-n 10]
"""
from __future__ import annotations

import argparse
import time

import torch
from _common import cores, interleaved_times, ms, percentile, print_table

from bert_demo.app.registry import Registry
from bert_demo.app.tabs import fill, learning, lecture, steps
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
    parser.add_argument("--lecture", action="store_true", help="time the fourth section's views instead")
    args = parser.parse_args()
    if args.lecture:
        lecture_times(args)
        return
    registry = Registry(device="cpu", allow_hub=False)
    loaded = registry.catalog.load(args.model)
    a, b = pair_of(loaded.tokenizer, 128)
    tokens = encode_input(loaded.model, loaded.tokenizer, a, b)["input_ids"].shape[1]
    started = time.perf_counter()
    first = steps.pretraining_example(registry, args.model, source="wiki", typed="", recipe="model", seed=0)
    counting = time.perf_counter() - started
    seeds, index, lengths = iter(range(1, 10**6)), iter(range(10**6)), []

    def example() -> None:
        shown = steps.pretraining_example(registry, args.model, source="wiki", typed="", recipe="model",
                                          seed=next(seeds))
        lengths.append(shown["ex_tokens"].count(BOX))

    with_gradient = [i for i, spec in enumerate(SPECS) if spec.gradient]
    heads = [(layer, head) for layer in range(1, loaded.model.config.num_hidden_layers + 1)
             for head in range(1, loaded.model.config.num_attention_heads + 1)]

    def forward() -> None:  # another input each call (its last word changed): a pass the tab has not kept
        i = next(index)
        layer, head = heads[i % len(heads)]
        shown = steps.forward_steps(registry, args.model, text_a=a, text_b=f"{b.rsplit(' ', 1)[0]} "
                                    f"{WORDS[i % len(WORDS)]}", layer=layer, head=head, step=i % len(STEP_NAMES))
        shown["fw_plot"].to_json()

    def training_step() -> None:
        shown = learning.training_step(registry, args.model, source="wiki", typed="", recipe="model", seed=next(seeds))
        for name in ("ts_flow", "ts_heads", "ts_params", "ts_losses"):
            shown[name].to_json()

    def gradient() -> None:  # a new example each call: its training step is taken for it
        i = next(index)
        layer, head = heads[i % len(heads)]
        shown = steps.forward_steps(registry, args.model, layer=layer, head=head,
                                    step=with_gradient[i % len(with_gradient)], reads="example", shows="gradient",
                                    seed=next(seeds))
        shown["fw_plot"].to_json()

    def walk() -> None:  # the next step of the same input: the tab's kept pass, the step's figure drawn
        shown = steps.forward_steps(registry, args.model, text_a=a, text_b=b, layer=1, head=1,
                                    step=next(index) % len(STEP_NAMES))
        shown["fw_plot"].to_json()

    def fill_mask() -> None:
        fill.fill_mask(registry, args.model, sentence=FILL, top_k=5)

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



def lecture_times(args: argparse.Namespace) -> None:
    """The fourth section's views, interleaved with Fill-mask, as the app computes and renders them."""
    import shutil
    import tempfile
    from pathlib import Path

    from bert_demo.inspection.by_hand import LINEAR_PARTS
    from bert_demo.training import timeline
    from bert_demo.training.settings import LESSON_BATCH, LESSON_RUN_EXAMPLES

    runs = Path(tempfile.mkdtemp())
    run = runs / "with-snapshots"
    shutil.copytree(args.model, run)
    registry = Registry(checkpoints_dir=Path(args.model).parent, runs_dir=runs, device="cpu", allow_hub=False)
    model = registry.catalog.load(args.model).model
    (run / timeline.FOLDER).mkdir()
    from safetensors.torch import save_file

    for step in (0, 10):  # as the run's writer keeps them: half precision, the tied decoder left out
        save_file(timeline.snapshot(model, frozenset({"cls.predictions.decoder.weight"})),
                  str(run / timeline.file_name(step)))
    seeds, parts = iter(range(1, 10**6)), [*LINEAR_PARTS, "masked-LM decoder"]
    layers = model.config.num_hidden_layers
    example = {"source": "wiki", "typed": "", "recipe": "model"}

    def batch() -> None:
        lecture.batch_step(registry, args.model, **example, seed=next(seeds), size=LESSON_BATCH)

    def hand() -> None:
        seed = next(seeds)
        lecture.by_hand(registry, args.model, **example, seed=seed, part=parts[seed % len(parts)],
                        layer=1 + seed % layers, head=1)

    def adam() -> None:
        shown = lecture.adam_over_time(registry, args.model, **example, seed=next(seeds), steps=10,
                                       batch_size=LESSON_RUN_EXAMPLES // 10)
        shown["lc_adam_plot"].to_json()

    def depth() -> None:
        shown = lecture.depth_across_training(registry, "runs/with-snapshots", **example, seed=next(seeds))
        shown["lc_depth_plot"].to_json()

    def fill_mask() -> None:
        fill.fill_mask(registry, args.model, sentence=FILL, top_k=5)

    try:
        times = interleaved_times({"batch_step": batch, "by_hand": hand, "adam_over_time": adam,
                                   "depth_across_training": depth, "fill_mask": fill_mask}, args.n, args.warmup)
    finally:
        shutil.rmtree(runs)
    print(f"{args.model}, {torch.get_num_threads()} threads of {cores()} cores; wiki, the model's recipe, a new seed "
          f"a call; batch_step of {LESSON_BATCH}, adam_over_time 10 steps of {LESSON_RUN_EXAMPLES // 10}, "
          f"depth_across_training over 2 snapshots and the final weights; {args.n} interleaved calls each after "
          f"{args.warmup} warm-up")
    reference = percentile(times["fill_mask"], 50)
    print_table(["call", "p50 ms", "p95 ms", "p50 / fill_mask's"],
                [[name, ms(percentile(t, 50)), ms(percentile(t, 95)), f"{percentile(t, 50) / reference:.1f}"]
                 for name, t in times.items()])


if __name__ == "__main__":
    main()
