"""The Gradio app, in small parts: `models` (the catalogue of models), `runs` (the one training slot and its line),
`handlers` (what each event does, callable from tests), `text` (what the pages say) and `ui` (layout and wiring).
"""
