"""The pre-training example the Step by step tab draws, as each of its sections reads it: from a named corpus or a
visitor's paragraphs, under the recipe the selected model was trained with or the paper's, on the model at the
header's step. The example itself is `inspection.pretraining_example`'s: nothing here draws or masks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bert_demo.app.handlers import FINAL, load_at
from bert_demo.app.queries import At, Query, ask
from bert_demo.app.registry import Registry
from bert_demo.app.state.catalog import LIVE
from bert_demo.config import read_metadata
from bert_demo.data.sources import APP_SOURCES
from bert_demo.training.settings import MAX_SEED, PAPER_RECIPE, TrainConfig

YOUR_TEXT = "your own paragraphs"
FIRST_SOURCE = "wiki"  # offline: the page opens on it
EXAMPLE_RECIPES = [("the one this model was trained with", "model"), ("the paper's", "paper")]


@dataclass(frozen=True)
class Draw(Query):
    """How section 1 of the Step by step tab draws its example, which every later section reads again."""

    PREFIX = "ex"
    source: str = ask(FIRST_SOURCE, "Drawn from", choices=[*APP_SOURCES, YOUR_TEXT],
                      info="32 passages of a corpus the seed picks, or your paragraphs")
    typed: str = ask("", "Your paragraphs (a blank line between them; B may come from another one)")
    recipe: str = ask("paper", "Recipe", choices=EXAMPLE_RECIPES,
                      info="the paper's picks 15%; the app's fast recipe picks 25%")
    seed: int = ask(0, "Seed", bounds=(0, MAX_SEED))  # checked with its range (`pretraining_example.check_seed`)


@dataclass(frozen=True)
class Drawn:
    """An example, with what drew it and the model it is asked of."""

    loaded: Any  # catalog.Loaded: the model at the header's step, its tokenizer, entry and folder
    trained: TrainConfig | None  # the recipe the model was trained with, where it kept one
    config: TrainConfig  # the recipe the example was drawn under
    documents: Any  # pretraining_example.Documents
    example: Any  # pretraining_example.PretrainingExample

    @property
    def ours(self) -> TrainConfig:
        """The model's own recipe, or the app's fast one where it kept none."""
        return self.trained or TrainConfig()


def drawn(registry: Registry, at: At, draw: Draw, owner: str | None = None) -> Drawn:
    """The example `draw` asks for (with its seed, from a named corpus or the typed paragraphs, under the model's
    recipe or the paper's), and the model `at` asks for; bad input raises ValueError with what is allowed."""
    from bert_demo.inspection import pretraining_example as examples

    seed = examples.check_seed(draw.seed)
    if draw.source not in (*APP_SOURCES, YOUR_TEXT):
        raise ValueError(f"draw from {', '.join(APP_SOURCES)} or {YOUR_TEXT}, not {str(draw.source)[:40]!r}")
    if draw.recipe not in dict(map(reversed, EXAMPLE_RECIPES)):
        raise ValueError(f"the recipe is 'model' (the one this model was trained with) or 'paper', not "
                         f"{str(draw.recipe)[:40]!r}")
    loaded = load_at(registry, at.model_name, at.snapshot, owner)
    trained = trained_with(registry, at.model_name, owner)
    ours = trained or TrainConfig()
    config = ours if draw.recipe == "model" else paper_recipe(ours)
    documents = (examples.typed_documents(draw.typed) if draw.source == YOUR_TEXT
                 else examples.corpus_sample(draw.source, seed))
    return Drawn(loaded, trained, config, documents, examples.draw(documents, loaded.tokenizer, config, seed))


def trained_with(registry: Registry, model_name: str, owner: str | None) -> TrainConfig | None:
    """The pre-training config the selected model was trained with, where its folder (or the run in progress)
    keeps one; None for a model trained elsewhere, a fine-tuned classifier, or a record this app cannot read."""
    entry = registry.catalog.resolve(model_name, owner)
    if entry.folder is None:
        job = registry.catalog.live()
        config = getattr(getattr(job, "trainer", None), "config", None) if entry.name == LIVE else None
        return config if isinstance(config, TrainConfig) else None
    stored = read_metadata(entry.folder).get("train_config")
    if not isinstance(stored, dict) or "corpus" not in stored:
        return None
    try:
        return TrainConfig.from_stored(stored)
    except (TypeError, ValueError):
        return None


def paper_recipe(config: TrainConfig) -> TrainConfig:
    """BERT's recipe at a config's sequence length (an example of the paper's fits the model the same way)."""
    return TrainConfig.from_dict({**config.to_dict(), **PAPER_RECIPE})


def model_shown(drawn: Drawn, snapshot: str) -> str:
    """The model an answer is under, as a sentence names it: its name, and its training step where not final."""
    return drawn.loaded.entry.name + ("" if snapshot in (None, "", FINAL) else f", at step {snapshot} of its "
                                                                             "training")
