"""bert_demo/app/handlers.py: a handler's refusal reaches the visitor as a short message, whatever it repeats."""
from __future__ import annotations

import gradio as gr
import pytest

from bert_demo.app.handlers import MAX_MESSAGE_CHARS, friendly


def test_a_refusal_that_repeats_a_long_input_keeps_its_start_and_end_and_cuts_the_middle():
    @friendly
    def handler(word: str) -> None:
        raise ValueError(f"no model called {word!r}: choose one from the list")

    with pytest.raises(gr.Error) as refused:
        handler("x" * 5000)
    message = refused.value.message
    assert len(message) <= MAX_MESSAGE_CHARS + 3 and "x" * 300 not in message
    assert message.startswith("No model called 'xxx") and message.endswith(": choose one from the list")


def test_a_file_the_page_uploaded_is_not_taken_for_a_web_address_though_its_url_names_this_app():
    from bert_demo.app.handlers import _names_a_web_address

    meta = {"_type": "gradio.FileData"}
    uploaded = {"path": "/tmp/gradio/0a1b/corpus.txt", "url": "http://127.0.0.1:7860/gradio_api/file=/tmp/gradio/0a1b/"
                "corpus.txt", "meta": meta}
    assert not _names_a_web_address([[], uploaded, "tiny"])
    assert _names_a_web_address([{"path": "https://example.com/huge.txt", "meta": meta}])
    assert _names_a_web_address([[{"path": None, "url": "http://example.com/huge.txt", "meta": meta}]])


def test_the_gradio_methods_the_app_overrides_are_gradios_with_the_parameters_it_passes():
    """`handlers.Blocks` overrides three of gradio's own methods (issue 81: an upgrade that renamed or reordered
    their parameters would break every request, and no test named them): each is still gradio's, and takes the
    parameters the override hands on, in that order."""
    import inspect

    import gradio as gr

    from bert_demo.app.handlers import Blocks

    overridden = sorted(name for name, value in vars(Blocks).items()
                        if callable(value) and getattr(value, "__module__", "") == Blocks.__module__)
    assert overridden == ["create_limiter", "preprocess_data", "process_api"]
    for name in overridden:
        assert callable(getattr(gr.Blocks, name, None)), f"gradio's Blocks has no {name}"
        ours = list(inspect.signature(getattr(Blocks, name)).parameters)
        theirs = list(inspect.signature(getattr(gr.Blocks, name)).parameters)
        named = [p for p in ours if p not in ("args", "kwargs")]
        assert theirs[:len(named)] == named, (name, theirs)
