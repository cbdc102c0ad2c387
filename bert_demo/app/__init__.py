"""The Gradio app, in small parts: `models` (the catalogue of models), `runs` (the one training slot and its line),
the events, callable from tests (`asking`: questions to a model; `training`: a run; `choosing`: which model the tabs
show; `handlers`: what they share), `text` (what the pages say) and `ui` (layout and wiring).
"""
