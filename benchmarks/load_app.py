"""Load: many simultaneous users of the app (fill-mask, next-sentence, attention) while a training run streams.

Why: the app is shared (a Space, a lab server). One run trains at a time while everyone else keeps asking the
model questions; every request must be answered, without errors, and nobody may receive another user's answer.

The script starts `python app.py` on 127.0.0.1, starts a training run through /train, then lets
--users threads, each with its own gradio_client (or, with --client http, gradio's plain HTTP API and a session of
its own), send --requests requests each (fill-mask, next-sentence and attention in turn, every text unique to its
user and request). Afterwards, with the server stopped, it checks each
answer against the backend functions run here on the same inputs: the top guess of every [MASK], P(B follows A)
and the attention token axis must be those of the request that asked. It prints latency p50/p95 per endpoint
against its target and against the same load sent first with no run training (what the serving stack allows on
this machine), throughput, errors and mismatches, and the run's speed under the load against its speed alone
(measured first, for SOLO_S seconds). It exits 1 on any error or mismatch.

    python benchmarks/load_app.py [--users 20] [--requests 6] [--model checkpoints/mini-english] [--client http]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, percentile, print_table
from bench_app import free_port, wait_for_page

SUBJECTS = ["the river", "my sister", "the old train", "a small dog", "the city council", "our teacher",
            "the new bridge", "a tired doctor", "the football club", "this museum"]
TRAIN_ARGS = (["wiki"], None, "tiny", 1000, 16, 1e-3, 64, 4096)  # corpus, upload, preset, steps, batch, lr, seq, V
SOLO_S = 8.0  # seconds the run trains alone first, to measure its solo speed
TARGETS_S = {"/fill_mask": 1.0, "/next_sentence": 1.0, "/attention": 2.0}  # p95 latency under load


@dataclass
class Request:
    """One request and what came back."""

    user: int
    endpoint: str
    inputs: tuple
    seconds: float = 0.0
    output: object = None
    error: str | None = None


@dataclass
class Run:
    """What the streaming /train client saw while the users were busy."""

    updates: list[tuple[float, str]] = field(default_factory=list)
    error: str | None = None
    saved: str | None = None


def inputs_for(user: int, i: int, model: str) -> tuple[str, tuple]:
    """The i-th request of `user`: the endpoint cycles; the text carries the user's and request's numbers."""
    subject = SUBJECTS[(user + i) % len(SUBJECTS)]
    tag = f"{user} {i}"
    endpoint = ["/fill_mask", "/next_sentence", "/attention"][(user + i) % 3]
    if endpoint == "/fill_mask":
        return endpoint, (model, f"{subject} saw {tag} [MASK] in the [MASK] yesterday.", 5)
    if endpoint == "/next_sentence":
        return endpoint, (model, f"{subject} counted {tag} boats on the lake.", f"then {subject} went home.")
    return endpoint, (model, f"{subject} read {tag} pages of the book.", "", 2, 1, "one head", False)


class HttpClient:
    """A visitor over gradio's plain HTTP API (POST /gradio_api/call/<name>, then read its event stream), with one
    session like a browser tab: what a remote user costs the server, without gradio_client's own CPU (about 50 ms
    a request, on the same cores as the server when the users run here). Inputs left out take their defaults."""

    def __init__(self, url: str):
        import httpx

        self.http = httpx.Client(base_url=url, timeout=120)
        self.endpoints = self.http.get("gradio_api/info").raise_for_status().json()["named_endpoints"]
        self.session = uuid.uuid4().hex

    def predict(self, *inputs, api_name: str):
        defaults = [p["parameter_default"] for p in self.endpoints[api_name]["parameters"][len(inputs):]]
        posted = self.http.post(f"gradio_api/call{api_name}", json={"data": [*inputs, *defaults],
                                                                     "session_hash": self.session})
        event_id = posted.raise_for_status().json()["event_id"]
        with self.http.stream("GET", f"gradio_api/call{api_name}/{event_id}") as stream:
            event = None
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.removeprefix("event:").strip()
                elif line.startswith("data:") and event in ("complete", "error"):
                    data = json.loads(line.removeprefix("data:"))
                    if event == "error" or data is None:  # None: the event was cancelled
                        raise RuntimeError(f"the app answered with an error: {data}")
                    return data[0] if len(data) == 1 else tuple(data)  # as gradio_client returns them
        raise RuntimeError(f"the event stream of {api_name} ended without an answer")


def connect(url: str, kind: str):
    from gradio_client import Client

    return HttpClient(url) if kind == "http" else Client(url, verbose=False, analytics_enabled=False)


def user(url: str, number: int, n: int, model: str, start: threading.Barrier, out: list[Request], kind: str) -> None:
    """One user: connect, wait for the others, then send `n` requests one after another, timing each."""
    try:
        client, failure = connect(url, kind), None
    except Exception as exc:  # noqa: BLE001  reported as this user's errors; the others still start together
        client, failure = None, f"could not connect: {type(exc).__name__}: {exc}"
    start.wait()
    for i in range(n):
        endpoint, inputs = inputs_for(number, i, model)
        request = Request(number, endpoint, inputs, error=failure)
        began = time.perf_counter()
        if client is not None:
            try:
                request.output = client.predict(*inputs, api_name=endpoint)
            except Exception as exc:  # noqa: BLE001  any failure is a finding to report, not a crash of the script
                request.error = f"{type(exc).__name__}: {exc}"
        request.seconds = time.perf_counter() - began
        out.append(request)


def warm_up(url: str, model: str) -> None:
    """One request per endpoint before the clock starts: the first loads the model (about a second), which is
    the cold start `bench_app.py` measures, not the load this script is about."""
    from gradio_client import Client

    client = Client(url, verbose=False, analytics_enabled=False)
    for endpoint, inputs in (inputs_for(0, i, model) for i in range(3)):
        client.predict(*inputs, api_name=endpoint)


def load(url: str, numbers: range, n: int, model: str, out: list[Request], server: int, kind: str
         ) -> tuple[float, float, float]:
    """The users `numbers`, started together, each sending `n` requests. Returns the seconds until all are done,
    and the CPU seconds the server process (pid `server`) and this script's clients spent meanwhile: on one
    machine the clients compete with the server for the same cores."""
    start = threading.Barrier(len(numbers) + 1)
    threads = [threading.Thread(target=user, args=(url, number, n, model, start, out, kind)) for number in numbers]
    for thread in threads:
        thread.start()
    start.wait()
    began, server_began, clients_began = time.perf_counter(), cpu_seconds(server), own_cpu_seconds()
    for thread in threads:
        thread.join()
    return (time.perf_counter() - began, cpu_seconds(server) - server_began, own_cpu_seconds() - clients_began)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, its finished children and its live descendants (a training run's
    own process among them), from /proc (Linux)."""
    stats = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        stats[int(stat.parent.name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
    tree, grew = {pid}, True
    while grew:
        grown = tree | {p for p, (parent, _) in stats.items() if parent in tree}
        tree, grew = grown, grown != tree
    return sum(stats[p][1] for p in tree if p in stats) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def follow_training(url: str, run: Run, stop: threading.Event) -> None:
    """Start a run through /train and record every streamed status line until `stop`, then cancel it."""
    from gradio_client import Client

    client = Client(url, verbose=False, analytics_enabled=False)
    job = client.submit(*TRAIN_ARGS, api_name="/train")
    began = time.perf_counter()
    try:
        for outputs in job:
            run.updates.append((time.perf_counter() - began, str(outputs[0])))
            if stop.is_set():
                job.cancel()
                break
    except Exception as exc:  # noqa: BLE001
        run.error = f"{type(exc).__name__}: {exc}"


def last_step(run: Run) -> int:
    """The step in the newest "Step N/M ..." status line the run streamed (0 before the first)."""
    steps = [int(status.split()[1].split("/")[0]) for _, status in run.updates if status.startswith("Step ")]
    return steps[-1] if steps else 0


def expected_answer(request: Request, model, tokenizer):
    """What the backend functions give for this request's own input: top guesses, P(next) or the token axis."""
    from bert_demo.inference import attention, fill_mask, next_sentence

    if request.endpoint == "/fill_mask":  # the guesses, and the text around the masks (guesses alone can repeat)
        text = request.inputs[1]
        return [ranked[0][0] for ranked in fill_mask(model, tokenizer, text, 5)], text.replace("[MASK]", "")
    if request.endpoint == "/next_sentence":
        return next_sentence(model, tokenizer, request.inputs[1], request.inputs[2])
    return attention(model, tokenizer, request.inputs[1])[0]


def answer(request: Request):
    """The same quantity, read from what the app sent back."""
    if request.endpoint == "/fill_mask":
        spans = request.output[0]["value"]
        return ([span["token"] for span in spans if span["class_or_confidence"]],
                "".join(span["token"] for span in spans if not span["class_or_confidence"]))
    if request.endpoint == "/next_sentence":
        return {c["label"]: c["confidence"] for c in request.output["confidences"]}["B follows A"]
    return json.loads(request.output[0]["plot"])["layout"]["xaxis"]["ticktext"]


def mismatches(requests: list[Request], model, tokenizer) -> list[str]:
    """Answers that are not the answer to the asker's own input. Next-sentence answers carry no text, so one
    must also be closer to its own expected probability than to any other request's."""
    answered = [r for r in requests if not r.error]
    expected = {id(r): expected_answer(r, model, tokenizer) for r in answered}
    others = [expected[id(r)] for r in answered if r.endpoint == "/next_sentence"]
    problems = []
    for r in answered:
        got, own = answer(r), expected[id(r)]
        if r.endpoint == "/next_sentence":
            wrong = abs(got - own) > 1e-4 or any(abs(got - p) < abs(got - own) for p in others)
        else:
            wrong = got != own
        if wrong:
            problems.append(f"user {r.user} {r.endpoint}: answered {got}, its own input gives {own}")
    return problems


def wait_for_checkpoint(runs: Path, timeout: float) -> str | None:
    """The run folder the cancelled training run saved into `runs`, once it is complete (None if it never is)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        done = [f.name for f in runs.iterdir() if (f / "bert_demo.json").is_file() and (f / "config.json").is_file()]
        if done:
            return done[0]
        time.sleep(0.5)
    return None


def launch(model_dir: Path, runs: Path) -> tuple[str, subprocess.Popen, Path]:
    port = free_port()
    log = runs / "app.log"
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "BERT_DEMO_RUNS": str(runs), "BERT_DEMO_HUB": "0",
           "BERT_DEMO_CHECKPOINTS": str(model_dir.parent)}
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=open(log, "w"),
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    wait_for_page(url, process, timeout=120)
    return url, process, log


def report(requests: list[Request], run: Run, wall: float, users: int, steps: tuple[int, int], streamed: int,
           kind: str) -> None:
    """Print latency per endpoint, throughput, and what the training run did meanwhile."""
    rows = []
    for endpoint in ["/fill_mask", "/next_sentence", "/attention", "all"]:
        times = [r.seconds for r in requests if endpoint in (r.endpoint, "all")]
        rows.append([endpoint, len(times), f"{percentile(times, 50) * 1000:.0f}",
                     f"{percentile(times, 95) * 1000:.0f}", f"{max(times) * 1000:.0f}"])
    print(f"{users} users ({kind} clients), {len(requests)} requests in {wall:.1f} s: {len(requests) / wall:.1f} "
          "requests/s, while one training run streamed")
    print_table(["endpoint", "requests", "p50 ms", "p95 ms", "max ms"], rows)
    print(f"training: step {steps[0]} when the users started, step {steps[1]} when they finished; {streamed} "
          "updates streamed meanwhile" + (f"; error {run.error}" if run.error else ""))
    print(f"then the run was cancelled: checkpoint {'runs/' + run.saved if run.saved else 'MISSING'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--requests", type=int, default=6, help="requests per user")
    p.add_argument("--model", type=Path, default=ROOT / "checkpoints" / "mini-english")
    p.add_argument("--client", choices=["gradio", "http"], default="gradio",
                   help="the users' client: gradio_client, or gradio's plain HTTP API (far less CPU on this machine)")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from bert_demo.checkpoint import load_pretrained

    model_name = f"checkpoints/{args.model.name}"
    with tempfile.TemporaryDirectory() as tmp:
        url, process, log = launch(args.model.resolve(), Path(tmp))
        requests: list[Request] = []
        alone: list[Request] = []  # the same load with no training run: what the serving stack alone allows
        run, stop = Run(), threading.Event()
        try:
            warm_up(url, model_name)
            reference = load(url, range(args.users, 2 * args.users), args.requests, model_name, alone,
                             process.pid, args.client)  # the same load with no run training
            trainer = threading.Thread(target=follow_training, args=(url, run, stop))
            trainer.start()
            while not any(s.startswith("Step") for _, s in run.updates) and trainer.is_alive():
                time.sleep(0.5)
            solo_began, solo_first = time.perf_counter(), last_step(run)  # the run alone, for SOLO_S seconds
            time.sleep(SOLO_S)
            solo = (last_step(run) - solo_first) / (time.perf_counter() - solo_began)
            first, streamed = last_step(run), len(run.updates)
            wall, server_cpu, clients_cpu = load(url, range(args.users), args.requests, model_name, requests,
                                                 process.pid, args.client)
            steps, streamed = (first, last_step(run)), len(run.updates) - streamed
            stop.set()
            trainer.join(timeout=120)
            run.saved = wait_for_checkpoint(Path(tmp), timeout=120)
        finally:
            process.terminate()
            process.wait(30)
        if run.error or not run.updates:
            print(log.read_text(errors="replace")[-3000:])
    model, tokenizer = load_pretrained(args.model)
    errors = [f"user {r.user} {r.endpoint}: {r.error}" for r in requests if r.error]
    errors += [f"user {r.user} {r.endpoint} (no training): {r.error}" for r in alone if r.error]
    wrong = mismatches(requests + alone, model, tokenizer)
    report(requests, run, wall, args.users, steps, streamed, args.client)
    loaded = (steps[1] - steps[0]) / wall
    print(f"training speed: {solo:.2f} steps/s alone before the users came, {loaded:.2f} steps/s under their load: "
          f"{loaded / solo:.0%} of solo (target: at least 50%)" if solo else "training speed: no steps alone")
    for name, (seconds, server_s, clients_s) in (("with no run", reference), ("while training", (wall, server_cpu,
                                                                                               clients_cpu))):
        print(f"CPU {name}: the server (its training process included) {server_s:.1f} s, this script's "
              f"clients {clients_s:.1f} s, of {os.cpu_count() * seconds:.1f} CPU-s in {seconds:.1f} s on "
              f"{os.cpu_count()} cores")
    for endpoint, target in TARGETS_S.items():
        p95 = percentile([r.seconds for r in requests if r.endpoint == endpoint], 95)
        reference = percentile([r.seconds for r in alone if r.endpoint == endpoint], 95)
        print(f"{endpoint} p95 {p95:.2f} s while training, {reference:.2f} s with no run (target: at most "
              f"{target:g} s): {'met' if p95 <= target else 'NOT met'}")
    problems = errors + wrong + (["the run streamed nothing while the users were busy"] if not streamed
                                 else []) + ([] if run.saved else ["the cancelled run left no checkpoint"])
    print(f"errors: {len(errors)}; answers that were not the asker's: {len(wrong)}; "
          f"problems in all: {len(problems)}")
    for line in problems[:10]:
        print("  ", line)
    return 1 if problems or run.error else 0


if __name__ == "__main__":
    sys.exit(main())
