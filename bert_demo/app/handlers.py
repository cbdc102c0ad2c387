"""What the app's events have in common: how a handler's error reaches the visitor, and the timeline choice.

The events themselves live with their tab (`bert_demo.app.tabs`) or the header (`bert_demo.app.header`). Every
handler takes the `Registry` first and returns (or, for training, yields) a dict from output names to values;
`bert_demo.app.ui` maps the names to its components. Tests call these functions directly. A refused input becomes a
toast with its message, never a traceback; so does an input that gradio itself refuses before any handler runs
(`Blocks`), a list given as something else and something else given as text among them. Refusals are logged as
`http_limits.QuietLog` logs them (`refusals`): the first of a kind from an address, then a line a minute with how many
more there were, not a line a refusal; the address is the asking request's (`asker`, which `Blocks` sets for every event
it answers).
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gradio as gr
from anyio import CapacityLimiter
from gradio.exceptions import ComponentProcessingError, InvalidPathError
from gradio_client.utils import is_http_url_like

from bert_demo.app.guards.http_limits import QuietLog
from bert_demo.app.visitors import address_of
from bert_demo.app.machine import import_heavy
from bert_demo.app.state.catalog import HubDownload, Loaded

if TYPE_CHECKING:
    from bert_demo.app.registry import Registry

Outputs = dict[str, Any]  # a handler's answer: output names to values
Components = dict[str, Any]  # a page's components by name, as the tabs' layouts return them
FINAL, NO_COMPARE = "final", "none"  # the timeline choices that mean "the weights as they are now" and "no comparison"
NOT_UPLOADED = ("That file was not uploaded to this app: upload it (on the page, or with gradio_client's handle_file), "
                "then ask again")
WEB_ADDRESS = ("Give the file itself, not its web address: download it, then upload it (on the page, or with "
               "gradio_client's handle_file and the file's path)")
MAX_MESSAGE_CHARS = 400  # a refusal longer than this repeats some input at length: its middle is cut
THREADS = 40  # gradio's threads for its own work (anyio's default, starlette's): the app's answers use anyio's own
asker = contextvars.ContextVar("asker", default=None)  # the address of the request being answered (None: this host's)
refusals = QuietLog()  # every refusal of a handler, of gradio's and of a line: a line a minute by address and kind


def brief(message: str) -> str:
    """A refusal as a visitor sees it, with its first letter capitalised: a message that repeats a long input (a
    5,000-character word, gradio's "Value: ... is not in the list of choices") keeps its start and its end, which
    say what is wrong and what to do."""
    message = str(message)
    if len(message) > MAX_MESSAGE_CHARS:
        message = f"{message[:MAX_MESSAGE_CHARS * 2 // 3]} … {message[-MAX_MESSAGE_CHARS // 4:]}"
    return message[:1].upper() + message[1:]


def friendly(fn: Callable) -> Callable:
    """Turn a handler's ValueError into a toast with its message (logged in `refusals`); anything else into a
    toast that says something went wrong, with the traceback in the log (the first of its kind from an address, then
    a line a minute). A `HubDownload` passes on: `ui.wire` answers the question again where it may download. The
    handler starts once torch and transformers are imported whole (`machine.import_heavy`): handlers import what
    they need where they need it, and two threads importing transformers at once can see it half-built."""

    def translate(exc: Exception) -> gr.Error:
        if isinstance(exc, ValueError):
            message = str(exc)
            refusals.warn(asker.get(), f"{fn.__name__} refused", message[:200])
            return gr.Error(brief(message), print_exception=False)
        refusals.warn(asker.get(), f"unexpected error in {fn.__name__}", type(exc).__name__, error=exc)
        return gr.Error(f"Something went wrong ({type(exc).__name__}). Try again, or choose another model.",
                        print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            try:
                import_heavy()
                yield from fn(*args, **kwargs)
            except (gr.Error, HubDownload):
                raise
            except Exception as exc:  # noqa: BLE001
                raise translate(exc) from None
        return generator

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            import_heavy()
            return fn(*args, **kwargs)
        except (gr.Error, HubDownload):
            raise
        except Exception as exc:  # noqa: BLE001
            raise translate(exc) from None
    return wrapper


def rebound(fn: Callable, arguments: Callable[[tuple, dict], dict[str, Any]]) -> Callable:
    """`fn` called with the keyword arguments that `arguments` makes of a call's own (a generator stays one), under
    its name and docstring: how `with_settings` and `queries.takes` hand a handler what it takes."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def handler(*args, **kwargs):
            yield from fn(**arguments(args, kwargs))
    else:
        @functools.wraps(fn)
        def handler(*args, **kwargs):
            return fn(**arguments(args, kwargs))
    return handler


def with_settings(names: Sequence[str], after: str | None = None) -> Callable[[Callable], Callable]:
    """A handler that takes each setting of `names` (the Train form's, `policy.FORM`, declared with the training
    settings) as a parameter after its parameter `after` (None: right after the registry), and receives them in its
    `**settings`, without those left out or None. Gradio names an endpoint's parameters by its handler's signature,
    so the form, the API and the handler all spell a setting once, in `names`; a view's other inputs are declared as
    queries (`queries.takes`)."""

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = 1 if after is None else [p.name for p in own].index(after) + 1
        added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for name in names]
        declared = signature.replace(parameters=[*own[:at], *added, *own[at:]])

        def split(args: tuple, kwargs: dict) -> dict[str, Any]:
            given = declared.bind(*args, **kwargs).arguments
            settings = {name: given.pop(name, None) for name in names}
            return {**given, **{name: value for name, value in settings.items() if value is not None}}

        handler = rebound(fn, split)
        handler.__signature__ = declared
        return handler
    return decorate


class Blocks(gr.Blocks):
    """The app's gr.Blocks. An input that gradio itself refuses, before any handler runs (a slider value out of
    range, a choice a radio does not offer, a value of the wrong type), is logged as the app's own refusals are,
    instead of gradio's 30-line traceback, which a visitor could make the server print as often as they like; so is
    a value that is not a list where a multiselect dropdown takes one, which gradio passes on to the handler. An
    API caller sends nothing for an input the API does not list (the visitor's key, ui.py): it is taken as None."""

    def create_limiter(self) -> None:
        """Gradio's own threads (reading inputs, writing answers, a run's generator): THREADS, however many workers
        its queue has (`launch(max_threads=...)` sets both; 256 threads of JSON work thrashed two cores)."""
        self.limiter = CapacityLimiter(total_tokens=THREADS)

    async def process_api(self, block_fn, inputs, state=None, request=None, *args, **kwargs):
        asker.set(address_of(request[0] if isinstance(request, list) and request else request))
        return await super().process_api(block_fn, inputs, state, request, *args, **kwargs)

    async def preprocess_data(self, block_fn, inputs, *args, **kwargs):
        if _names_a_web_address(inputs):  # gradio would download it into its upload store, of any size
            refusals.warn(asker.get(), f"{block_fn.name} refused", "a file given as a web address")
            raise gr.Error(WEB_ADDRESS, print_exception=False)
        missing = block_fn.inputs[len(inputs):]
        if missing and all(block.skip_api for block in missing):  # an API caller sends none (the visitor key)
            inputs = [*inputs, *[None] * len(missing)]
        try:
            _check_lists(block_fn.inputs, inputs)
            return await super().preprocess_data(block_fn, inputs, *args, **kwargs)
        except gr.Error as exc:
            refusal = exc
        except ComponentProcessingError as exc:  # a value the component could not read at all: name the input
            refusal = gr.Error(_unreadable(block_fn.inputs, str(exc)))
        except InvalidPathError as exc:  # gradio's message names the path, made absolute in the server's folders
            refusals.warn(asker.get(), f"{block_fn.name} refused by gradio", str(exc)[:200].replace("\n", " "))
            raise gr.Error(NOT_UPLOADED, print_exception=False) from None
        except ValueError as exc:  # too few inputs, a file that is not one: gradio's first line says what
            refusal = gr.Error(str(exc).strip().split("\n")[0])
        refusal.message = brief(refusal.message)
        refusal.print_exception = False
        refusals.warn(asker.get(), f"{block_fn.name} refused by gradio",
                      str(refusal.message)[:200].replace("\n", " "))
        raise refusal from None


def _check_lists(inputs: list, values: list) -> None:
    """gr.Error where a multiselect dropdown is given something other than a list (gradio hands it on as it came,
    and the handler's loop over a number failed with a TypeError), or a text box something other than text (gradio
    made a list its text, "['...']", and the handler answered that)."""
    for block, value in zip(inputs, values):
        name = f"“{block.label}”" if getattr(block, "label", None) else "This input"
        if isinstance(block, gr.Dropdown) and block.multiselect and value is not None and not isinstance(value, list):
            raise gr.Error(f"{name} takes a list of choices (such as [] for none), not {repr(value)[:40]}")
        if isinstance(block, gr.Textbox) and value is not None and not isinstance(value, str):
            raise gr.Error(f"{name} takes text, not {type(value).__name__} {repr(value)[:40]}")


def _names_a_web_address(value: Any) -> bool:
    """Whether an event's inputs give a file by its web address (gradio_client's `handle_file("https://...")`): a
    path that is one, or a web address without a path. A file the page uploaded here has a path in the upload store,
    and its `url` names this app's own copy of it."""
    if isinstance(value, dict):
        if (value.get("meta") or {}).get("_type") == "gradio.FileData":
            path, url = str(value.get("path") or ""), str(value.get("url") or "")
            return is_http_url_like(path) or (not path and is_http_url_like(url))
        return any(_names_a_web_address(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_names_a_web_address(item) for item in value)
    return False


def _unreadable(inputs: list, gradio_message: str) -> str:
    """gradio's paragraphs on a value a component could not read, as one sentence naming the input."""
    index = re.search(r"input component at index (\d+)", gradio_message)
    value = re.search(r"the event handler was: (.*) \(of type", gradio_message)
    expected = re.search(r"Expected a `(.+?)`", gradio_message)
    name = getattr(inputs[int(index[1])], "label", None) if index and int(index[1]) < len(inputs) else None
    return (f"{f'“{name}”' if name else 'An input'} cannot take {value[1] if value else 'the value given'}"
            f"{f': give a {expected[1]}' if expected else ''}")


def snapshot_step(choice: str | None) -> int | None:
    """A timeline choice ("final", or a step number as text) as the step to load, None for the final weights."""
    if choice in (None, "", FINAL):
        return None
    try:
        return int(choice)
    except (TypeError, ValueError):
        raise ValueError(f"unknown training step {choice!r}: choose “{FINAL}” or one of the run's snapshot steps") \
            from None


def load_at(registry: Registry, model_name: str, choice: str | None, owner: str | None, encoder: bool = False
            ) -> Loaded:
    """The model at a timeline choice; a step asked of a model that kept no timeline is refused as such. `encoder`:
    the tab reads only the encoder, so a fine-tuned classifier serves too (`Catalog.load`)."""
    step, catalog = snapshot_step(choice), registry.catalog
    if step is not None and not catalog.timeline_steps(model_name, owner):
        raise ValueError(f"only “{FINAL}” can be shown of {catalog.resolve(model_name, owner).label}: it kept no "
                         "snapshots of its training")
    return catalog.load_at(model_name, step, owner, encoder)


def step_name(choice: str) -> str:
    step = snapshot_step(choice)
    return "Final weights" if step is None else f"Step {step:,}" + (" (the random start)" if step == 0 else "")


def timeline_choices(steps: list[int]) -> list[tuple[str, str]]:
    """The timeline dropdown's (label, value) pairs: the final weights first, then every snapshot."""
    return [("final weights", FINAL)] + [(step_name(str(step)).lower(), str(step)) for step in steps]


def narrowed(value: float, maximum: int, info: str | None = None) -> gr.Slider:
    """A layer or head slider narrowed to a model's `maximum`, its value moved only where it is past it; `info`
    says the range where given (every tab's layer and head sliders narrow this way)."""
    words = {"info": info} if info else {}
    return gr.Slider(maximum=maximum, value=maximum, **words) if value > maximum else gr.Slider(maximum=maximum,
                                                                                                    **words)


def go_to(tab: str) -> Callable[[], gr.Tabs]:
    """A handler that opens `tab` (the start-here row's buttons and the Model tab's links)."""
    def go() -> gr.Tabs:
        return gr.Tabs(selected=tab)
    return go
