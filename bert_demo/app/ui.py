"""The app's page: the header and eight tabs, each a module of `bert_demo.app.tabs` that lays itself out and wires its
own events to its handlers; `wire`, which binds a handler to the registry and to each visitor's line; and the
visitor's key, which the browser keeps and every event that asks who the visitor is sends (`ask_for_keys`).

The main actions are the twenty-one named API endpoints (/train, /compare_runs, /fill_mask, /head_importance,
/next_sentence, /attention, /neuron, /neighbours, /projection, /finetune, /classify, /attribution, /attention_change,
/pretraining_example, /forward_steps, /training_step, /across_training, /batch_step, /by_hand, /adam_over_time,
/depth_across_training); the helper events, and a pair's head importance, are private. The page's style sheet
(`CSS`) is each tab's rules, kept beside the tab.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import anyio
import gradio as gr
from gradio import component_meta
from starlette.middleware import Middleware

from bert_demo.app import header
from bert_demo.app.guards.admission import DOWNLOAD, Admission, Refused, kind_of
from bert_demo.app.guards.http_limits import (
    UPLOAD_RETENTION_S,
    UPLOAD_SWEEP_S,
    Limits,
    UploadLedger,
    close_slow_connections,
    max_body_bytes,
    quiet_repeated_warnings,
)
from bert_demo.app.guards.queue_door import QUEUE_SIZE, WORKERS, Door
from bert_demo.app.visitors import Visitor, is_key, new_key, trusted_proxies, visitor_of
from bert_demo.app.handlers import Blocks, Components, brief, refusals
from bert_demo.app.runs.run_process import question_asked
from bert_demo.app.state.catalog import HubDownload, downloads_here
from bert_demo.app.folders import read_examples
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import (
    attention,
    classifier,
    embeddings,
    fill,
    finetune,
    learning_views,
    lecture_views,
    model,
    nsp,
    steps,
    steps_views,
    train,
    train_views,
)
from bert_demo.app.tabs.heads import head_names

PAGE = ("model", "step", "page", "tabs")  # what every tab may wire to: the model chosen above the tabs, and the page
KEY_STORAGE = "bert-demo-visitor"  # where a browser keeps its visitor key (visitors.py)
ANALYTICS_EVERY = 50  # events between gradio's summaries of request times (its default: 1)
CSS = """
.textfield { word-break: normal !important; overflow-wrap: break-word; }  /* highlighted text: words stay whole */
""" + "".join(
    tab.CSS for tab in (header, fill, nsp, attention, embeddings, train_views, finetune, classifier, model, steps_views,
                     learning_views, lecture_views)
)  # the page's own rule, then each tab's (the CSS of its module, or of its views module)


def launch_kwargs(registry: Registry | None = None, uploads: UploadLedger | None = None) -> dict[str, Any]:
    """What `demo.launch()` needs besides host and port (gradio 6 takes css and theme here), the limits on what a
    request may bring (`http_limits`: its body, and what the uploads of `uploads` may hold; and uvicorn's servers
    close a connection whose request head is slow to come), and the door to gradio's queue, which no address may
    fill (`queue_door`)."""
    close_slow_connections()
    quiet_repeated_warnings()
    caps = (registry or Registry()).caps
    theme = gr.themes.Default(font=["system-ui", "Segoe UI", "Roboto", "Helvetica", "Arial", "sans-serif"],
                              font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])
    limits = Middleware(Limits, max_body=max_body_bytes(caps.max_upload_bytes), uploads=uploads or UploadLedger())
    return {"css": CSS, "theme": theme, "max_file_size": caps.max_upload_bytes, "max_threads": WORKERS,
            "enable_monitoring": False,  # gradio's /monitoring printed a line a request: 448 MB of log an hour
            "app_kwargs": {"middleware": [limits, Middleware(Door)]}}


# gradio writes a .pyi stub beside the module of every component class (for custom components' type checkers): one
# beside ui.py would hide ui.py from ours, so none is written for this one.
_write_stub, component_meta.create_or_modify_pyi = component_meta.create_or_modify_pyi, lambda *args: None
try:
    class VisitorKey(gr.BrowserState):
        """The browser's copy of its visitor key (`visitors.new_key`), kept in its local storage and sent with
        every event whose handler asks who the visitor is (`wire`). It is no API parameter: a script is known by
        its session. (gradio encrypts the stored copy with a secret that every page's config carries, which hides
        nothing from the browser itself: a fixed one keeps a visitor's key valid when the app restarts.)"""

        @property
        def skip_api(self) -> bool:
            return True

        def get_block_name(self) -> str:
            return "browserstate"  # drawn by gradio's own BrowserState
finally:
    component_meta.create_or_modify_pyi = _write_stub


def kept_key(key: Any) -> str:
    """The key a page found in its browser's storage, or a new one where it found none (a first visit)."""
    return key if is_key(key) else new_key()


def wire(handler: Callable, registry: Registry, components: Components, admission: Admission) -> Callable:
    """`handler` bound to the registry, answering {component: value}. A handler whose last parameter is `owner`
    gets the visitor there (`visitors.Visitor`: the browser's identity, or else its session, or else its network, and
    the address it asks from): its event also sends the browser's key (`ask_for_keys`). A question (a handler that
    returns) waits in its own line of `admission`, outside gradio's queue, and is answered in a worker thread; one
    that needs a model from the Hugging Face Hub (`catalog.HubDownload`) leaves that line and is answered again in the
    downloads' line (`admission.DOWNLOAD`). A run (a handler that yields) keeps its own line in the registry."""
    parameters = [p.replace(default=inspect.Parameter.empty)  # gradio passes every input: no defaults needed
                  for p in list(inspect.signature(handler).parameters.values())[1:]]  # without the registry
    owner = bool(parameters) and parameters[-1].name == "owner"
    parameters = parameters[:-1] if owner else parameters
    names = [p.name for p in parameters]  # the inputs' names, as the handler calls them
    if owner:  # the event's last input, added once every event is wired (an API caller sends none)
        parameters.append(inspect.Parameter("key", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))
    parameters.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request,
                                        default=None if owner else inspect.Parameter.empty))

    def call(args: tuple, visitor: Visitor | None) -> Any:
        return handler(registry, *args, *([visitor] if owner else []))

    def split(args: list) -> tuple[tuple, Visitor | None, Any]:
        """The handler's inputs, the visitor from the request and the key that end them, and the request."""
        request, key = args.pop(), args.pop() if owner else None
        return tuple(args), visitor_of(request, key), request

    if inspect.isgeneratorfunction(inspect.unwrap(handler)):
        def fn(*args):
            for result in call(*split(list(args))[:2]):
                yield {components[name]: value for name, value in result.items()}
    else:
        def answer(args: tuple, visitor: Visitor | None, downloads: bool) -> dict:
            question_asked()  # a run in progress yields cores to the visitors while they wait for answers
            downloads_here.set(downloads)  # in this thread's own context
            try:
                return {components[name]: value for name, value in call(args, visitor).items()}
            finally:
                question_asked()  # counted from the answer: a long one keeps the run on one core throughout

        async def fn(*args):
            args, visitor, request = split(list(args))
            try:
                try:
                    async with admission.admit(kind_of(handler.__name__, dict(zip(names, args))), visitor):
                        if gone(request):  # its place came after its asker left: nobody would read the answer
                            raise Refused(GONE)
                        return await anyio.to_thread.run_sync(answer, tuple(args), visitor, False)
                except HubDownload:
                    async with admission.admit(DOWNLOAD, visitor):
                        return await anyio.to_thread.run_sync(answer, tuple(args), visitor, True)
            except Refused as refusal:
                refusals.warn(getattr(visitor, "address", None), f"{handler.__name__} refused", str(refusal))
                raise gr.Error(brief(str(refusal)), print_exception=False) from None
    fn.__name__, fn.__signature__, fn.handler = handler.__name__, inspect.Signature(parameters), handler
    fn.__annotations__ = {"request": gr.Request}  # where gradio looks for the request parameter
    fn.asks_key = owner
    return fn


GONE = "the page or client that asked this has gone, so it was not answered"


def gone(request: Any) -> bool:
    """Whether whoever asked has left: gradio marks every event of a session dead when its stream closes (a page
    closed, a client that gave up), but an event waiting in the app's lines was computed all the same (the app stayed
    busy 130-340 s after each flood had stopped, answering nobody)."""
    app = getattr(getattr(request, "request", None), "app", None)
    queue = getattr(getattr(app, "get_blocks", lambda: None)(), "_queue", None)
    session = getattr(request, "session_hash", None)
    if queue is None or session is None:
        return False
    events = [event for job in list(queue.active_jobs) if job for event in job if event.session_hash == session]
    return bool(events) and not any(event.alive for event in events)


def ask_for_keys(demo: gr.Blocks, key: VisitorKey) -> None:
    """Give every event whose handler asks who the visitor is the browser's key as its last input, and give a
    browser that has none its key when the page opens."""
    for block_fn in demo.fns.values():
        if getattr(block_fn.fn, "asks_key", False):
            block_fn.inputs.append(key)
    demo.load(kept_key, key, key, api_visibility="private", queue=False)


def tab_view(c: Components, own: Components, links: tuple[str, ...]) -> Components:
    """What one tab wires to: its own components, the page's (`PAGE`), and those of other tabs that it names in its
    `LINKS`; any other name is a KeyError as the page is built, so that every link between tabs is declared."""
    return {**{name: c[name] for name in (*PAGE, *links)}, **own}


def build_demo(registry: Registry | None = None, admission: Admission | None = None) -> gr.Blocks:
    """The whole app. `registry` decides where models come from (tests pass one pointing at a temp folder), and
    `admission` how many questions are answered at once (tests pass one with small limits)."""
    registry = registry or Registry()
    admission = admission or Admission()
    default = registry.catalog.default_model()
    examples = read_examples(registry.catalog.resolve(default).folder) if default else None
    heads = list(head_names(registry.catalog.config_of(default)[1])) if default else []
    trusted_proxies()  # a Space owner's mistyped list of proxies stops the app here, with what is wrong
    with Blocks(title="BERT from scratch", delete_cache=(UPLOAD_SWEEP_S, UPLOAD_RETENTION_S)) as demo:
        key = VisitorKey(storage_key=KEY_STORAGE, secret=KEY_STORAGE)
        c: Components = header.layout(registry)
        # the page opens on an answer (Fill-mask, its first example already filled in); on a phone the tab bar
        # wraps onto two lines, so that every tab is one tap away
        with gr.Tabs(elem_id="tabs", selected="fill", overflow_behavior="wrap") as tabs:
            own = {fill: fill.layout(examples, heads), nsp: nsp.layout(examples),
                   attention: attention.layout(examples), embeddings: embeddings.layout(),
                   train: train.layout(registry), finetune: finetune.layout(registry), model: model.layout(),
                   steps: steps.layout()}
        own[classifier] = own[finetune]  # the questions to the classifier a fine-tune leaves sit in its tab
        for part in own.values():
            c.update(part)
        c["tabs"], c["page"] = tabs, demo

        def bound(handler: Callable) -> Callable:
            return wire(handler, registry, c, admission)

        for tab, components in own.items():
            tab.wire(tab_view(c, components, getattr(tab, "LINKS", ())), bound)
        header.wire(demo, c, bound)  # what the model choice changes, in every tab
        ask_for_keys(demo, key)
    # gradio summarises its last 10,000 events with pandas after every event by default: 2 ms a request, 7 ms once
    # a long-lived Space has seen 10,000. Every 50 events is fresh enough for its monitoring page; an owner's wins.
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(ANALYTICS_EVERY))
    # uvicorn believes X-Forwarded-For from loopback and would hand the app a forged address: the app alone decides
    # whose header it believes (visitors.trusted_proxies)
    os.environ.setdefault("FORWARDED_ALLOW_IPS", "")
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=None)  # each question's line limits it (admission)
    return demo
