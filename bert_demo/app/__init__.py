"""The Gradio app, in small parts that compose: who asks and what a model folder or an upload holds (`visitors`,
`folders`, `uploads`); beside one another, never importing one another, the guards (`guards/`: each question's line,
what a request may bring), the state (`state/`: `catalog`, `forms`, `kept`) and the runs (`runs/`: `slot`, `job`,
`disk`); the `registry` that ties them; the page (`ui`, `header`) and one module per tab (`tabs/`), whose handlers tests
call; `text` holds what the pages say.
"""
