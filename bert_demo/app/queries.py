"""A view's inputs, declared once. A query is a frozen dataclass of `ask` fields: each names an input as the handler,
the API and a link name it, with its default, label, help and bounds. From the declaration come the tab's input
components (`Query.input`), the parameters gradio and gradio_client see (`takes`: gradio names an endpoint's
parameters by its handler's signature and takes their defaults from the components' first values, so an API caller
may name any input and leave out the rest), the components an event reads (`inputs`), and the query the handler gets
(`Query.of`, which refuses a whole number that is not one, naming the field). The Train form is built the same way
from the training settings' own metadata (`train.setting_input`)."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import gradio as gr

from bert_demo.app.handlers import FINAL, Components, rebound
from bert_demo.config import whole_number

PAGE = {"model_name": "model", "snapshot": "step"}  # the page's own inputs, above the tabs, by parameter name


@dataclass(frozen=True)
class Ask:
    """How one input is asked: its label and help on the page, the choices offered ((words, value) pairs or values),
    its bounds, whether it is a whole number (`noun`: what a refusal calls it, where not the field's name), and the
    page's component that holds it where that is not the query's own (`Query.component_name`)."""

    label: str
    info: str | None = None
    choices: tuple = ()
    bounds: tuple[float, float] | None = None
    whole: bool = False
    noun: str | None = None
    component: str | None = None


def ask(default: Any, label: str, *, info: str | None = None, choices: tuple | list = (),
        bounds: tuple[float, float] | None = None, whole: bool = False, noun: str | None = None,
        component: str | None = None) -> Any:
    """A field of a query: its default and how it is asked (`Ask`)."""
    return field(default=default, metadata={"ask": Ask(label, info, tuple(choices), bounds, whole, noun, component)})


class Query:
    """The base of every view's query (a frozen dataclass of `ask` fields): its components on the page are named
    PREFIX_field (or, without a PREFIX, as the field), unless a field names its own."""

    PREFIX: ClassVar[str] = ""

    @classmethod
    def asked(cls, name: str) -> Ask:
        return next(f.metadata["ask"] for f in fields(cls) if f.name == name)

    @classmethod
    def component_name(cls, name: str) -> str:
        """The page's component that holds the field `name`."""
        return cls.asked(name).component or (f"{cls.PREFIX}_{name}" if cls.PREFIX else name)

    @classmethod
    def input(cls, name: str, kind: type, **looks: Any) -> Any:
        """The field `name`'s input component, a `kind` (gr.Slider, gr.Radio, ...) with the declared label, help,
        first value, choices and bounds; `looks` lays it out (scale, min_width, lines, ...) or overrides them."""
        asked, default = cls.asked(name), next(f.default for f in fields(cls) if f.name == name)
        default = list(default) if isinstance(default, tuple) else default  # a multiselect's value is a list
        words = {"label": asked.label, "info": asked.info, "value": default,
                 "elem_id": cls.component_name(name).replace("_", "-")}
        if asked.choices:
            words["choices"] = list(asked.choices)
        if asked.bounds:
            words |= {"minimum": asked.bounds[0], "maximum": asked.bounds[1]}
        if asked.bounds and asked.whole and kind is gr.Slider:
            words["step"] = 1
        return kind(**{key: value for key, value in {**words, **looks}.items() if value is not None})

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Any:
        """The query of `values` by field name; a field left out or None takes its default, and a whole number
        arrives as one (gradio sends floats: 2.0 is 2, and 1.5 is refused with the field's name)."""
        given = {}
        for f in fields(cls):
            value, asked = values.get(f.name), f.metadata["ask"]
            value = f.default if value is None else value
            noun = f"the {asked.noun or f.name.replace('_', ' ')}"
            given[f.name] = whole_number(value, noun) if asked.whole else value
        return cls(**given)


@dataclass(frozen=True)
class At(Query):
    """The model a view asks, chosen above the tabs, and the step of its training it is asked at (a snapshot its run
    kept, or the final weights)."""

    model_name: str | None = ask(None, "Model", component="model")
    snapshot: str = ask(FINAL, "The model at training step", component="step")


def takes(**queries: type[Query]) -> Callable[[Callable], Callable]:
    """A handler that gets each of `queries` (its parameter's name: the query's class) as one object, called as
    gradio and API callers call it: with each field as a parameter of its own, by name, where the query's parameter
    stands. The fields' parameters default to None (the declared default), so any may be left out; a query already
    built may be given by its parameter's name instead (`forward_steps(registry, at=..., show=...)`)."""

    def decorate(fn: Callable) -> Callable:
        signature, parameters, components = inspect.signature(fn), [], {}
        for parameter in signature.parameters.values():
            query = queries.get(parameter.name)
            if query is None:
                parameters.append(parameter)
                continue
            for f in fields(query):
                parameters.append(inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))
                components[f.name] = query.component_name(f.name)
        declared = signature.replace(parameters=parameters)  # a parameter after a query has a default
        extra = next((p.name for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD), None)

        def split(args: tuple, kwargs: dict) -> dict[str, Any]:
            built = {name: kwargs.pop(name) for name, query in queries.items() if isinstance(kwargs.get(name), query)}
            given = declared.bind(*args, **kwargs).arguments
            for name, query in queries.items():
                asked = {f.name: given.pop(f.name, None) for f in fields(query)}
                given[name] = built[name] if name in built else query.of(asked)
            passed_on = given.pop(extra, {}) if extra else {}  # **settings: passed on as they came
            return {**given, **passed_on}

        handler = rebound(fn, split)
        handler.__signature__, handler.components = declared, components
        return handler
    return decorate


def inputs(c: Components, handler: Callable, **named: str) -> list[Any]:
    """The components an event of `handler` reads, in its parameters' order: a query's field from the component
    that holds it, the model and its step from the page's (`PAGE`), any other parameter from the component `named`
    gives it, or else the component of its own name; the registry (first) and the visitor (`owner`) are not
    inputs."""
    components = {**PAGE, **getattr(handler, "components", {}), **named}
    names = [p for p in list(inspect.signature(handler).parameters)[1:] if p != "owner"]
    return [c[components.get(name, name)] for name in names]
