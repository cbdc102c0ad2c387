"""App cold start: from launching `python app.py` to the first HTTP 200 on `/` and the first answered /fill_mask.

Why: on a Space (or a laptop) the app is started often; what a user waits for is the page, then the first answer
(which also loads a model). The reference, timed the same way in the same run, is a minimal Gradio app with one
/fill_mask endpoint that does no work: Gradio's own floor (importing gradio, starting the server, serving the page).
Launches alternate (ours, reference, reference, ours, ...) and each is killed at the end.

The app is given a random-weight checkpoint (or --checkpoint DIR) through BERT_DEMO_MODELS_DIR and asked to fill
a mask with it via gradio_client; a second call shows the warm latency. If app.py or its /fill_mask endpoint is not
there, the script says so and exits 0.

    python benchmarks/bench_app.py [--rounds 2] [--checkpoint DIR]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _common import ROOT, make_random_checkpoint, print_table

TEXT = "paris is the capital of [MASK]."
REFERENCE_APP = '''import gradio as gr
with gr.Blocks() as demo:
    model, text, top_k, out = gr.Textbox(), gr.Textbox(), gr.Number(5), gr.Textbox()
    gr.Button("Fill").click(lambda model_name, sentence, top_k: sentence, [model, text, top_k], out,
                            api_name="fill_mask")
demo.launch()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_page(url: str, process: subprocess.Popen, timeout: float) -> None:
    """Poll `url` every 50 ms until it answers 200; raise if the process dies or time runs out."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the app exited with code {process.returncode} before serving its page")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no HTTP 200 from {url} within {timeout:.0f} s")


def launch(script: Path, model_name: str, env: dict[str, str], timeout: float, log: Path) -> dict[str, float]:
    """Start `script`, time page and first two /fill_mask answers (seconds since launch), then stop it."""
    from gradio_client import Client

    port = free_port()
    env = {**env, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False"}
    url = f"http://127.0.0.1:{port}/"
    with open(log, "w") as out:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            wait_for_page(url, process, timeout)
            page = time.perf_counter() - start
            client = Client(url, verbose=False, analytics_enabled=False)
            connected = time.perf_counter() - start
            if "/fill_mask" not in str(client.view_api(print_info=False, return_format="dict")):
                raise LookupError("the app has no /fill_mask endpoint")
            client.predict(model_name=model_name, sentence=TEXT, top_k=5, api_name="/fill_mask")
            first = time.perf_counter() - start
            warm = time.perf_counter()
            client.predict(model_name=model_name, sentence=TEXT, top_k=5, api_name="/fill_mask")
            return {"page": page, "client": connected, "first": first, "warm": time.perf_counter() - warm}
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="launches of each app (alternating)")
    p.add_argument("--checkpoint", type=Path, help="model to ask (default: a random mini checkpoint, built now)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a page")
    p.add_argument("--app", type=Path, default=ROOT / "app.py", help="the app script to launch")
    args = p.parse_args()
    app = args.app.resolve()
    if not app.is_file():
        print(f"not available: {app} does not exist yet")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = args.checkpoint or make_random_checkpoint(tmp / "models" / "bench", "mini")
        reference = tmp / "reference_app.py"
        reference.write_text(REFERENCE_APP)
        env = {**os.environ, "BERT_DEMO_MODELS_DIR": str(folder.parent), "BERT_DEMO_HUB": "0"}
        apps = {"ours": app, "reference": reference}
        times: dict[str, list[dict[str, float]]] = {name: [] for name in apps}
        for round_ in range(args.rounds):
            for name in (list(apps) if round_ % 2 == 0 else list(apps)[::-1]):
                log = tmp / f"{name}.log"
                try:
                    times[name].append(launch(apps[name], f"models/{folder.name}", env, args.timeout, log))
                except Exception as exc:  # noqa: BLE001  the app is being built: any failure is "not available"
                    if name == "reference":
                        raise
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                    print(f"not available: our app could not be measured ({type(exc).__name__}: {exc})\n{tail}")
                    return
    med = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in times.items()}
    print(f"app cold start, {args.rounds} launch(es) each, alternating; model models/{folder.name}; "
          "times from process launch")
    print_table(["app", "page 200 s", "client connected s", "first /fill_mask s", "warm /fill_mask ms"],
                [[name, f"{m['page']:.2f}", f"{m['client']:.2f}", f"{m['first']:.2f}", f"{m['warm'] * 1000:.0f}"]
                 for name, m in med.items()])
    print(f"ratio ours/reference: page {med['ours']['page'] / med['reference']['page']:.2f}x, "
          f"first answer {med['ours']['first'] / med['reference']['first']:.2f}x")
    print("target: ours page 200 (usable page) < 10 s")


if __name__ == "__main__":
    main()
