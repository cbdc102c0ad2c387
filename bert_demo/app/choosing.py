"""Which model the tabs show: what changes with the choice (header, Model tab, sliders, head switches, timeline,
examples), refreshing the list, and downloading a checkpoint."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from bert_demo.app import text
from bert_demo.app.asking import head_names
from bert_demo.app.handlers import FINAL, NO_COMPARE, Outputs, friendly, timeline_choices
from bert_demo.app.registry import Registry


def selected(registry: Registry, model_name: str, layer: float, head: float, owner: str | None = None) -> Outputs:
    """Everything that depends on the chosen model: header line, Model tab, head switches, layer sliders."""
    try:
        summary, info = registry.model_summary(model_name, owner), registry.model_info(model_name, owner)
    except ValueError as exc:
        message = f"⚠️ {str(exc)[:1].upper()}{str(exc)[1:]}"
        return {"summary": message, "model_info": message, "model_card": ""}
    card = info.pop("model_card") or "*This checkpoint has no model card (README.md).*"
    entry, config = registry.config_of(model_name, owner)
    own = _shows_its_examples(registry, entry.folder, owner)
    steps = registry.timeline_steps(model_name, owner)
    snapshots = timeline_choices(steps)
    return {"summary": summary, "model_info": text.model_markdown(info), "model_card": card,
            "fill_examples": gr.Column(visible=own), "nsp_examples": gr.Column(visible=own),
            "att_examples_box": gr.Column(visible=own),
            "step": gr.Dropdown(choices=snapshots, value=FINAL, visible=bool(steps)),
            "compare": gr.Dropdown(choices=[("no comparison", NO_COMPARE)] + snapshots, value=NO_COMPARE,
                                   visible=bool(steps)),
            "heads_off": gr.Dropdown(choices=list(head_names(config)), value=[], multiselect=True),
            "emb_layer": gr.Slider(maximum=config.num_hidden_layers),
            **narrow(registry, model_name, layer, head, owner)}


def _shows_its_examples(registry: Registry, folder: Path | None, owner: str | None) -> bool:
    """Whether the page's examples belong to this model: they were read from the default model's folder, and
    their labels ("layer 2, head 4: the previous token") would be false of any other."""
    default = registry.default_model(owner)
    return folder is not None and default is not None and registry.resolve(default, owner).folder == folder


def narrow(registry: Registry, model_name: str, layer: float, head: float, owner: str | None = None) -> Outputs:
    """The layer and head sliders narrowed to the model's range. A value changes only when out of range: setting
    it anyway would undo an example the visitor clicked while the page was still loading."""
    try:
        _, config = registry.config_of(model_name, owner)
    except ValueError:
        return {"layer": gr.skip(), "head": gr.skip()}
    return {"layer": _slider(layer, config.num_hidden_layers), "head": _slider(head, config.num_attention_heads)}


def _slider(value: float, maximum: int) -> gr.Slider:
    return gr.Slider(maximum=maximum, value=maximum) if value > maximum else gr.Slider(maximum=maximum)


def refresh(registry: Registry, model_name: str | None, owner: str | None = None) -> Outputs:
    choices = registry.choices(owner)
    return {"model": gr.Dropdown(choices=choices, value=model_name or registry.default_model(owner)),
            "compare_runs": gr.Dropdown(choices=choices)}


@friendly
def download(registry: Registry, model_name: str, owner: str | None = None) -> Outputs:
    return {"download_file": gr.File(value=str(registry.zip_checkpoint(model_name, owner)), visible=True)}
