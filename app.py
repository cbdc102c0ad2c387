"""BERT from scratch: `python app.py` serves the app; on Hugging Face Spaces this same file is the entry point.

Host and port come from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (Spaces sets them); models from ./checkpoints,
./runs, or the folders named by BERT_DEMO_CHECKPOINTS, BERT_DEMO_RUNS, BERT_DEMO_MODELS_DIR. On a ZeroGPU Space,
visitors' runs train in GPU calls (docs/deploy.md).
"""
if __name__ != "__mp_main__":  # the name multiprocessing gives this file in a training run's process: no app there
    from bert_demo.app.machine import hold_heap_down

    hold_heap_down()  # before any thread is started
    from bert_demo.app.runs import zerogpu  # noqa: F401 - first: on ZeroGPU, `spaces` must be imported before gradio
    from bert_demo.app.registry import Registry
    from bert_demo.app.ui import build_demo, launch_kwargs

    registry = Registry()
    demo = build_demo(registry)

if __name__ == "__main__":
    demo.launch(prevent_thread_lock=True, **launch_kwargs(registry))
    registry.warm_up()  # torch and the default model load in the background once the page is served
    demo.block_thread()
