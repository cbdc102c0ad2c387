"""The Gradio app, in small parts that compose: the state (`registry`: `catalog`, `forms`, `disk`, `slot`, `job`),
visitors' text (`uploads`) and their lines (`admission`, `visitors`), what a request may bring (`http_limits`), the
page (`ui`, `header`) and one module per tab (`tabs/`), whose handlers tests call; `text` holds what the pages say.
"""
