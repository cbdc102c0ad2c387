"""Latency as a visitor sees it: Attention's map and a fine-tuned classifier's first answer, timed in chromium.

Why: the issue's targets are what a person waits for, from the click to the answer drawn on the page (at most 1 s
for Attention, 1.5 s for a classifier's first answer, which loads the model). The script starts `python app.py` on
127.0.0.1 with a throwaway runs folder holding 2 x --requests copies of one fine-tuned classifier (each copy is a
model the app has not loaded, so every answer is a first answer; the catalogue keeps only 3 models). Then:

- Attention: --requests times, a new sentence A (one word changed) and Show attention; timed from the click until
  the map's axis shows the new word;
- Classifier: --requests times, a classifier not yet loaded chosen in the Fine-tune tab, then Classify; timed from
  the click until the answer's top class is drawn (the sentences alternate between a positive and a negative one,
  so each answer changes what is drawn).

Both are timed inside the page: a script clicks the button and polls every animation frame until the answer is
drawn, as a person's click would be. (Playwright's own click first scrolls the button into view and waits for it
to stand still; measured here, that added about 0.9 s to Attention at 1400 px, where the page scrolls to the map.)

Reference, in the same run: the same requests sent with gradio_client (the server's time and the HTTP round trip,
without the page's drawing), the classifier's on the other half of the copies, also first answers. It prints
medians and the ratio browser / client. Use a quiet machine (`uptime`).

    python benchmarks/browser_latency.py --classifier runs/<a fine-tuned run> [--requests 20] [--width 1400]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, percentile, print_table
from bench_app import free_port, wait_for_page

MODEL = "checkpoints/mini-english"
WORDS = ["river", "doctor", "city", "teacher", "bridge", "museum", "train", "hospital", "king", "market", "school",
         "church", "village", "island", "army", "ship", "road", "house", "forest", "station"]
SENTENCES = [("a gripping, funny and surprisingly moving film.", "positive"),
             ("a dull, tedious and badly acted mess.", "negative")]
TARGETS_S = {"attention": 1.0, "classifier, first answer": 1.5}
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CLICK_UNTIL = """async ([button, drawn, arg]) => {
  const check = new Function('arg', 'return ' + drawn), start = performance.now();
  document.querySelector(button).click();
  while (!check(arg)) {
    if (performance.now() - start > 60000) throw new Error('no answer within 60 s');
    await new Promise(resolve => requestAnimationFrame(resolve));
  }
  return (performance.now() - start) / 1000;
}"""  # seconds from a click on `button` until the expression `drawn` holds, measured by the page itself
ATTENTION_DRAWN = "(document.querySelector('#att-plot .js-plotly-plot')?.layout?.xaxis?.ticktext || []).includes(arg)"
LABEL_DRAWN = "document.querySelector('#ft-label .output-class')?.textContent.trim() === arg"


def sentence(i: int) -> tuple[str, str]:
    """Attention's i-th sentence A and the word that tells its map from the one before."""
    word = WORDS[i % len(WORDS)]
    return f"the {word} stood near the old wall on sunday.", word


def copies(classifier: Path, runs: Path, n: int) -> list[str]:
    """`n` copies of the classifier's folder under `runs`, each a model the app has not loaded; their names."""
    names = []
    for i in range(n):
        shutil.copytree(classifier, runs / f"copy-{i:02d}")
        names.append(f"runs/copy-{i:02d}")
    return names


def browser_times(url: str, requests: int, width: int) -> dict[str, list[float]]:
    """Seconds from each click to its answer drawn, in chromium at `width` px."""
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {"attention": [], "classifier, first answer": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": width, "height": 1000})
        page.goto(url)
        page.wait_for_selector("#fill-label-0 :text('%')", timeout=60_000)  # the arrival answer: torch is loaded
        page.get_by_role("tab", name="Attention").click()
        page.wait_for_function("document.querySelector('#att-plot .js-plotly-plot')?.data?.length > 0")
        for i in range(requests):
            text, word = sentence(i)
            page.fill("#att-a textarea", text)
            times["attention"].append(page.evaluate(CLICK_UNTIL, ["#att-button", ATTENTION_DRAWN, word]))
        page.get_by_role("tab", name="Fine-tune").click()
        for i in range(requests):
            text, top = SENTENCES[i % 2]
            page.click("#ft-classifier input")
            page.get_by_role("option").nth(i).click()
            page.fill("#ft-text-a textarea", text)
            times["classifier, first answer"].append(page.evaluate(CLICK_UNTIL, ["#ft-button", LABEL_DRAWN, top]))
        browser.close()
    return times


def client_times(url: str, requests: int, classifiers: list[str]) -> dict[str, list[float]]:
    """The same requests through gradio_client: the server's time and the round trip, no drawing."""
    from gradio_client import Client

    client = Client(url, verbose=False, analytics_enabled=False)
    times: dict[str, list[float]] = {"attention": [], "classifier, first answer": []}
    for i in range(requests):
        start = time.perf_counter()
        client.predict(model_name=MODEL, text_a=sentence(i)[0], text_b="", layer=1, head=1, view="one head", hide=False,
                       api_name="/attention")
        times["attention"].append(time.perf_counter() - start)
    for i, name in enumerate(classifiers):
        start = time.perf_counter()
        client.predict(name, SENTENCES[i % 2][0], "", api_name="/classify")
        times["classifier, first answer"].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--classifier", type=Path, required=True, help="a fine-tuned run's folder")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--width", type=int, default=1400, help="the browser's width in px (390: a phone)")
    args = parser.parse_args()
    if not (args.classifier / "config.json").is_file():
        sys.exit(f"{args.classifier} is not a model folder (no config.json)")
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        runs.mkdir()
        names = copies(args.classifier, runs, 2 * args.requests)
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
               "GRADIO_ANALYTICS_ENABLED": "False", "BERT_DEMO_RUNS": str(runs), "BERT_DEMO_HUB": "0"}
        with open(Path(tmp) / "app.log", "w") as log:
            process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=log)
            try:
                wait_for_page(url, process, 60)
                seen = browser_times(url, args.requests, args.width)
                sent = client_times(url, args.requests, names[args.requests:])
            finally:
                process.terminate()
                process.wait(20)
    rows = [[name, f"{percentile(seen[name], 50):.2f}", f"{percentile(seen[name], 95):.2f}",
             f"{percentile(sent[name], 50):.2f}", f"{percentile(seen[name], 50) / percentile(sent[name], 50):.2f}",
             f"{TARGETS_S[name]:.1f}"] for name in seen]
    print(f"{args.requests} requests each, chromium at {args.width} px; seconds")
    print_table(["request", "browser p50", "browser p95", "gradio_client p50", "browser / client", "target p50"],
                rows)


if __name__ == "__main__":
    main()
