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

With --floods it measures instead what one script from one address does to everyone else (issues 51 and 58): for
each flood, --flood-threads threads from one address for --flood-s seconds, while another visitor, from another
address with a session of its own, asks Fill-mask once a second; every one of its questions must be answered within
5 s, and the app's log must grow by at most 1 MB. The floods of issue 51 ask through gradio's plain API
(`/gradio_api/call/<name>`, a new session for every call) and read the answers: Fill-mask, Attention, and a mix of
attention, neuron, neighbours, head importance, next sentence and projection. Those of issue 58 never read one:
neuron views of a 60-word text posted and left unread, and event streams of sessions that never joined
(`/gradio_api/queue/data?session_hash=...`). Those of issue 63: a 425-word text with 20 [MASK]s posted to
`/gradio_api/run/fill_mask` and `/api/fill_mask` without a session; Fill-mask asked of eight hub names
(attacker/model0 ... model7), served by a stand-in hub on loopback (tests/app/stand_in_hub.py: checkpoints/mini-english,
22 MB, sent at --hub-mb-s) where the app downloads them; routes and functions that do not exist (`run/nothing`,
`call/nothing`, an fn_index of none); `heads_off` and `/compare_runs`' runs given as a number; and the 425-word
Fill-mask from five public IPv4 addresses, and from five /64s of one /56 (the threads shared between them). Then one
60 MB body is posted: it must be refused within 3 s, and the app's memory must not grow by 150 MB; and five
`/gradio_api/run/train` posts from one address: another address's run must be taken after them. The addresses are
written in X-Forwarded-For, with loopback named as the trusted proxy (BERT_DEMO_TRUSTED_PROXIES=127.0.0.1), as a
Space's proxy writes them; an app from before issue 51 believed the header from loopback through uvicorn.
--app-root runs another checkout's app.py (the code before a change, from `git worktree add`) under this script.

    python benchmarks/load_app.py --floods [--flood-threads 30] [--flood-s 20] [--kinds KIND ...] [--app-root DIR]
                                  [--hub-mb-s 10]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, percentile, print_table
from bench_app import free_port, wait_for_page

SUBJECTS = ["the river", "my sister", "the old train", "a small dog", "the city council", "our teacher",
            "the new bridge", "a tired doctor", "the football club", "this museum"]
TRAIN_ARGS = (["wiki"], None, "tiny", 1000, 16, 1e-3, 64, 4096)  # corpus, upload, preset, steps, batch, lr, seq, V
SOLO_S = 8.0  # seconds the run trains alone first, to measure its solo speed
TARGETS_S = {"/fill_mask": 1.0, "/next_sentence": 1.0, "/attention": 2.0}  # p95 latency under load
FLOOD_FROM, VISITOR_FROM = "93.184.216.34", "151.101.1.69"  # the flood's address, and the other visitor's
FIVE_IPV4 = ["93.184.216.34", "2.16.7.1", "8.8.4.4", "9.9.9.9", "1.0.0.1"]  # five networks' floods
FIVE_IPV6 = [f"2a00:1450:4001:8{i}c::1" for i in range(5)]  # five /64s of one subscriber's /56
TWENTY_IPV4 = [f"93.184.{i}.34" for i in range(20)]  # issue 69: twenty networks' floods fill gradio's places
TWENTY_56S = [f"2a00:1450:4001:{i:02x}00::1" for i in range(20)]  # twenty /56s of one /48
HUB_NAMES = [f"attacker/model{i}" for i in range(8)]  # more than the app's hub cache keeps (5)
SERVED_BY_HUB = ROOT / "checkpoints" / "mini-english"  # what the stand-in hub serves as every one of them
OTHERS_TARGET_S = 5.0  # the other visitor's Fill-mask, answered every time within this, under any flood
LOG_TARGET_MB = 1.0  # what the app's log may grow by during one flood
LONG_TEXT = " ".join(f"{SUBJECTS[i % len(SUBJECTS)]} walked past {i} old houses." for i in range(8))  # 61 words
MASKED_TEXT = " ".join(f"{SUBJECTS[i % len(SUBJECTS)]} walked past {'[MASK]' if i % 2 == 0 and i < 40 else 'the'} old "
                       "houses." for i in range(56))  # 425 words, 20 [MASK]s: 488 of mini-english's 512 tokens
HEAVY_TEXT = " ".join(f"{SUBJECTS[i % len(SUBJECTS)]} saw the [MASK] by the old houses." for i in range(20))[:963]
# issue 69's short heavy question: 949 characters, under the 1,000 of the line for long questions, and 20 [MASK]s
MEMORY_CEILING_MB = 3072  # the app's resident memory under any flood (docs/limits.md)
BODY_MB, BODY_TARGET_S, BODY_GROWTH_MB = 60, 3.0, 150  # a body that size: refused within, memory growing less than


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
    """The i-th request of `user`, its inputs in the API's order (the model, its training step "final", then the
    endpoint's own): the endpoint cycles; the text carries the user's and request's numbers."""
    subject = SUBJECTS[(user + i) % len(SUBJECTS)]
    tag = f"{user} {i}"
    endpoint = ["/fill_mask", "/next_sentence", "/attention"][(user + i) % 3]
    if endpoint == "/fill_mask":
        return endpoint, (model, "final", f"{subject} saw {tag} [MASK] in the [MASK] yesterday.", 5)
    if endpoint == "/next_sentence":
        return endpoint, (model, "final", f"{subject} counted {tag} boats on the lake.", f"then {subject} went home.")
    return endpoint, (model, "final", f"{subject} read {tag} pages of the book.", "", 2, 1, "one head", False)


class HttpClient:
    """A visitor over gradio's plain HTTP API (POST /gradio_api/call/<name>, then read its event stream), with one
    session like a browser tab: what a remote user costs the server, without gradio_client's own CPU (about 50 ms
    a request, on the same cores as the server when the users run here). Inputs left out take their defaults."""

    def __init__(self, url: str, address: str | None = None, session: bool = True):
        import httpx

        headers = {"X-Forwarded-For": address} if address else {}  # whom a trusted proxy says it forwards
        self.http = httpx.Client(base_url=url, timeout=120, headers=headers)
        self.endpoints = self.http.get("gradio_api/info").raise_for_status().json()["named_endpoints"]
        self.session = uuid.uuid4().hex if session else None  # None: gradio makes a new session for every call

    def predict(self, *inputs, api_name: str, **named):
        """The endpoint's answer to `inputs` in its order, then `named` by the API's parameter names (as
        gradio_client takes them); any left out takes its default."""
        declared = self.endpoints[api_name]["parameters"][len(inputs):]
        unknown = set(named) - {p["parameter_name"] for p in declared}
        if unknown:
            raise TypeError(f"{api_name} has no parameter {sorted(unknown)[0]!r}")
        rest = [named.get(p["parameter_name"], p["parameter_default"]) for p in declared]
        session = {"session_hash": self.session} if self.session else {}
        posted = self.http.post(f"gradio_api/call{api_name}", json={"data": [*inputs, *rest], **session})
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


def launch(model_dir: Path, runs: Path, app_root: Path = ROOT, hub: str | None = None
           ) -> tuple[str, subprocess.Popen, Path]:
    """`python app.py` from `app_root` on a free port, serving `model_dir`'s folder, its runs and log in `runs`, hub
    ids taken from `hub` (a stand-in's address; None: hub loading off)."""
    port = free_port()
    log = runs / "app.log"
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "BERT_DEMO_RUNS": str(runs), "BERT_DEMO_HUB": "0",
           "BERT_DEMO_CHECKPOINTS": str(model_dir.parent), "BERT_DEMO_TRUSTED_PROXIES": "127.0.0.1"}
    if hub is not None:  # huggingface_hub's progress bars would be most of the log: the app's own lines are measured
        env.update(BERT_DEMO_HUB="1", HF_ENDPOINT=hub, BERT_DEMO_HUB_CACHE=str(runs / "hub-cache"),
                   HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=app_root, env=env, stdout=open(log, "w"),
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


def flood_question(kind: str, i: int, model: str) -> tuple[str, tuple]:
    """The i-th question of a flood of `kind`: Fill-mask, Attention, or each of the mixed kinds in turn."""
    sentence = f"{SUBJECTS[i % len(SUBJECTS)]} saw {i} boats on the lake."
    mixed = [("/attention", (model, sentence, "", 2, 1, "one head", False)),
             ("/neuron", (model, sentence, "", 2, 1, 1)),
             ("/neighbours", (model, "river", f"the river ran past {i} houses.", 2)),
             ("/head_importance", (model, f"the [MASK] saw {i} boats on the lake.")),
             ("/next_sentence", (model, sentence, "then everyone went home.")),
             ("/projection", (model, "monday friday paris london king queen man woman"))]
    if kind == "fill_mask":
        return "/fill_mask", (model, f"{SUBJECTS[i % len(SUBJECTS)]} saw {i} [MASK] on the lake.", 5)
    if kind == "attention":
        return mixed[0]
    return mixed[i % len(mixed)]


def flooder(url: str, kind: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """One thread of a flood: questions one after another from FLOOD_FROM, a new session for each, until `stop`."""
    if kind in OWN:
        OWN[kind](url, model, number, stop, out)
        return
    client, i = HttpClient(url, FLOOD_FROM, session=False), number * 100_000
    while not stop.is_set():
        endpoint, inputs = flood_question(kind, i, model)
        i += 1
        try:
            client.predict(*inputs, api_name=endpoint)
            out["answered"] += 1
        except RuntimeError:  # the app answered with a message: refused
            out["refused"] += 1
        except Exception:  # noqa: BLE001  a failed connection or an HTTP error
            out["failed"] += 1


def post_unread(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Issue 58's first flood: neuron views of a 60-word text, posted one after another and never read (taken:
    "answered"; refused with the app's message: "refused"; anything else, "Queue is full" among it: "failed")."""
    import httpx

    headers = {"X-Forwarded-For": FLOOD_FROM}
    with httpx.Client(base_url=url, timeout=120, headers=headers) as client:
        while not stop.is_set():
            try:
                neuron = [model, LONG_TEXT, "", 2, 1, 1, "final"]  # layer 2, head 1, the first word, final weights
                status = client.post("gradio_api/call/neuron", json={"data": neuron})
                out[{200: "answered", 429: "refused"}.get(status.status_code, "failed")] += 1
            except httpx.HTTPError:
                out["failed"] += 1


def unknown_streams(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Issue 58's second flood: event streams of sessions that never joined, each held open up to 3 s (refused at
    once: "refused"; a stream that started, whatever became of it: "answered"; no answer at all: "failed")."""
    import httpx

    headers, i = {"X-Forwarded-For": FLOOD_FROM}, 0
    with httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=3), headers=headers) as client:
        while not stop.is_set():
            i, started = i + 1, False
            try:
                with client.stream("GET", f"gradio_api/queue/data?session_hash=never-{number}-{i}") as stream:
                    started = True
                    out["refused" if stream.status_code == 404 else "answered"] += 1
                    for _ in stream.iter_bytes():
                        pass
            except httpx.HTTPError:  # held open its 3 s, or broken off (gradio's traceback), or no answer
                out["failed"] += 0 if started else 1


def counted(out: Counter, send) -> None:
    """One request of a flood, counted by how it ended: taken ("answered": 200), refused with a message (4xx, or
    the app's error), or anything else ("failed")."""
    import httpx

    try:
        response = send()
        out["answered" if response.status_code == 200 else
            "refused" if response.status_code < 500 or "error" in response.text else "failed"] += 1
    except httpx.HTTPError:
        out["failed"] += 1


def run_routes(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Issue 63's first flood: the 425-word Fill-mask posted to `run/fill_mask` and `api/fill_mask` in turn, without
    a session (answered in the request itself)."""
    import httpx

    with httpx.Client(base_url=url, timeout=120, headers={"X-Forwarded-For": FLOOD_FROM}) as client:
        for i in range(10**9):
            if stop.is_set():
                return
            route = "run" if (number + i) % 2 else "api"
            counted(out, lambda route=route: client.post(f"gradio_api/{route}/fill_mask",
                                             json={"data": [model, "final", MASKED_TEXT, 5, []]}))


def hub_names(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Fill-mask asked of the hub names in turn, through /call/ (a new session each), read to its answer."""
    client, i = HttpClient(url, FLOOD_FROM, session=False), number
    while not stop.is_set():
        try:
            client.predict(model_name=HUB_NAMES[i % len(HUB_NAMES)], sentence="the [MASK] sat on the mat.", top_k=5,
                           api_name="/fill_mask")
            out["answered"] += 1
        except RuntimeError:
            out["refused"] += 1
        except Exception:  # noqa: BLE001  a failed connection or an HTTP error
            out["failed"] += 1
        i += 1


def unknown_routes(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Routes and functions that do not exist, in turn (404, "refused", is the app's answer)."""
    import httpx

    asked = [("run/nothing", {"data": []}), ("call/nothing", {"data": []}), ("api/nothing", {"data": []}),
             ("run/predict", {"data": [], "fn_index": 9999}),
             ("queue/join", {"data": [], "fn_index": 9999, "session_hash": f"flood-{number}"})]
    with httpx.Client(base_url=url, timeout=30, headers={"X-Forwarded-For": FLOOD_FROM}) as client:
        while not stop.is_set():
            for route, body in asked:
                counted(out, lambda route=route, body=body: client.post(f"gradio_api/{route}", json=body))


def mistyped_lists(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """`heads_off` and /compare_runs' runs given as a number, through /call/ (the app's message: "refused")."""
    client = HttpClient(url, FLOOD_FROM, session=False)
    asked = [("/fill_mask", (model, "the [MASK] sat.", 3, 7)), ("/compare_runs", (7, "tokens"))]
    for i in range(10**9):
        if stop.is_set():
            return
        endpoint, inputs = asked[(number + i) % 2]
        try:
            client.predict(*inputs, api_name=endpoint)
            out["answered"] += 1
        except RuntimeError:
            out["refused"] += 1
        except Exception:  # noqa: BLE001
            out["failed"] += 1


def from_networks(addresses: list[str], text: str = MASKED_TEXT):
    """A flood of a Fill-mask (the 425-word text) through /call/, its threads shared between `addresses`."""
    def flood(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
        client = HttpClient(url, addresses[number % len(addresses)], session=False)
        while not stop.is_set():
            try:
                client.predict(model_name=model, sentence=text, top_k=5, api_name="/fill_mask")
                out["answered"] += 1
            except RuntimeError:
                out["refused"] += 1
            except Exception:  # noqa: BLE001
                out["failed"] += 1
    return flood


DEEP_TEXT = " ".join(["the river rose after the spring rains and the boats waited"] * 40)  # about 450 word pieces


def deep_looks(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Issue 69's memory flood: a thread of five addresses' looks inside, in turn: the forward pass of a 450-piece
    text, on the shipped models by turns (a pass of its own each: the text changes), and a training step on a new
    example of each."""
    client = HttpClient(url, FIVE_IPV4[number % len(FIVE_IPV4)], session=False)
    models, asked = ["checkpoints/small-english", "checkpoints/mini-english"], 0
    while not stop.is_set():
        asked += 1
        name = models[asked % 2]
        try:
            if asked % 3:
                client.predict(model_name=name, text_a=f"{number} {asked} {DEEP_TEXT}", text_b="", layer=1, head=1,
                               step=asked % 31, api_name="/forward_steps")
            else:
                client.predict(model_name=name, source="wiki", typed="", recipe="paper", seed=number * 1000 + asked,
                               snapshot="final", steps=1, dropout="off", api_name="/training_step")
            out["answered"] += 1
        except RuntimeError:
            out["refused"] += 1
        except Exception:  # noqa: BLE001
            out["failed"] += 1


TYPED_TEXT = "\n\n".join(
    " ".join(f"The {w} stood by the river in the year {y}, and people came from far away to see it." for y in range(5))
    for w in ("mill", "tower", "bridge", "church", "market", "harbour", "castle", "garden"))[:5000]  # 5,000 characters


def training_steps(addresses: list[str], typed_every: int = 0):
    """Issue 79's floods: training steps of 20 steps with the paper's dropout, threads shared between `addresses`,
    each on a new wiki example, or (every `typed_every`-th) on 5,000 typed characters."""
    def flood(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
        client, asked = HttpClient(url, addresses[number % len(addresses)], session=False), 0
        while not stop.is_set():
            asked += 1
            typed = typed_every and asked % typed_every == 0
            try:
                client.predict(model_name=model, source="your own paragraphs" if typed else "wiki",
                               typed=TYPED_TEXT if typed else "", recipe="paper",
                               seed=number * 1000 + asked, snapshot="final", steps=20, dropout="paper",
                               api_name="/training_step")
                out["answered"] += 1
            except RuntimeError:
                out["refused"] += 1
            except Exception:  # noqa: BLE001
                out["failed"] += 1
    return flood


def upload_progress(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Issue 79's stream flood: one upload cut off by its sender (thread 0 sends it), then streams of its progress,
    each held open up to 10 s (started: "answered"; refused: "refused")."""
    import httpx

    upload_id = "abandoned-upload"
    headers = {"X-Forwarded-For": FLOOD_FROM}
    if number == 0:
        body = b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.txt\"\r\n\r\n" + b"x" * 200_000

        def cut_off():
            yield body  # and no closing boundary: the sender leaves
            raise httpx.ReadError("the sender left")
        try:
            httpx.post(f"{url}gradio_api/upload?upload_id={upload_id}", content=cut_off(), timeout=10,
                       headers={**headers, "content-type": "multipart/form-data; boundary=b"})
        except Exception:  # noqa: BLE001
            pass
    with httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=10), headers=headers) as client:
        while not stop.is_set():
            try:
                with client.stream("GET", f"gradio_api/upload_progress?upload_id={upload_id}") as stream:
                    out["answered" if stream.status_code == 200 else "refused"] += 1
                    for _ in stream.iter_bytes():
                        pass
            except httpx.HTTPError:
                out["failed"] += 0


def unread_calls(url: str, model: str, number: int, stop: threading.Event, out: Counter) -> None:
    """Issue 79's memory flood: Fill-masks posted through /call/ (a new session each) and never read."""
    import httpx

    with httpx.Client(base_url=url, timeout=60, headers={"X-Forwarded-For": TWENTY_IPV4[number % 20]}) as client:
        i = 0
        while not stop.is_set():
            i += 1
            counted(out, lambda i=i: client.post("gradio_api/call/fill_mask", json={
                "data": [model, "final", f"the [MASK] saw {number} {i} boats.", 5, []]}))


UNREAD = {"unread neuron views": post_unread, "unknown sessions' streams": unknown_streams}  # issue 58's floods
STEPS_79 = {"training steps, five IPv4 addresses": training_steps(FIVE_IPV4),
            "training steps and typed, twenty IPv4": training_steps(TWENTY_IPV4, typed_every=2),
            "training steps and typed, twenty /56s": training_steps(TWENTY_56S, typed_every=2),
            "upload progress streams": upload_progress, "unread calls": unread_calls}  # issue 79's floods
OWN = {**UNREAD, "run and api routes": run_routes, "hub names": hub_names, "unknown routes": unknown_routes,
       "mistyped lists": mistyped_lists, "five IPv4 addresses": from_networks(FIVE_IPV4),
       "five /64s of one /56": from_networks(FIVE_IPV6),
       "five IPv4 addresses, short heavy": from_networks(FIVE_IPV4, HEAVY_TEXT),
       "twenty IPv4 addresses": from_networks(TWENTY_IPV4), "twenty /56s of one /48": from_networks(TWENTY_56S),
       "deep looks": deep_looks, **STEPS_79}  # floods with a flooder of
# their own (issues 58, 63 and 69)
KINDS = ("fill_mask", "attention", "mixed", *OWN)


def flood(url: str, kind: str, model: str, threads: int, seconds: float) -> tuple[Counter, list[Request]]:
    """`threads` flooders of `kind` for `seconds`; meanwhile, from 2 s in, another visitor asks Fill-mask once a
    second. Returns what the flood got, and the other visitor's questions."""
    stop, counts = threading.Event(), [Counter() for _ in range(threads)]  # one a thread: no count is lost
    workers = [threading.Thread(target=flooder, args=(url, kind, model, n, stop, counts[n])) for n in range(threads)]
    for worker in workers:
        worker.start()
    other, asked = HttpClient(url, VISITOR_FROM), []
    began = time.perf_counter()
    time.sleep(2.0)
    while time.perf_counter() - began < seconds:
        _, inputs = inputs_for(0, 3 * len(asked), model)  # a Fill-mask question, unique to its turn
        request, started = Request(0, "/fill_mask", inputs), time.perf_counter()
        try:
            request.output = other.predict(*inputs, api_name="/fill_mask")
        except Exception as exc:  # noqa: BLE001  a refusal is a finding to report
            request.error = f"{type(exc).__name__}: {exc}"
        request.seconds = time.perf_counter() - started
        asked.append(request)
        time.sleep(max(0.0, 1.0 - request.seconds))
    stop.set()
    for worker in workers:
        worker.join(timeout=120)
    return sum(counts, Counter()), asked


def flood_row(kind: str, got: Counter, asked: list[Request], grew_mb: float) -> tuple[list, list[str]]:
    """One flood's row of the table (the other visitor's questions answered, how fast, the log's growth, and the
    verdict on the targets), and the targets it missed."""
    times = [r.seconds for r in asked] or [math.nan]
    answered = [r for r in asked if not r.error]
    in_time = len(answered) == len(asked) > 0 and max(times) <= OTHERS_TARGET_S
    quiet = grew_mb <= LOG_TARGET_MB
    row = [kind, got["answered"], got["refused"], got["failed"], f"{len(answered)} of {len(asked)}",
           f"{percentile(times, 50):.2f}", f"{max(times):.2f}", f"{grew_mb:.2f}",
           "met" if in_time and quiet else "NOT met"]
    missed = [] if in_time else [f"{kind} flood: the other visitor's Fill-mask was answered {len(answered)} of "
                                 f"{len(asked)} times, slowest {max(times):.1f} s"]
    missed += [] if quiet else [f"{kind} flood: the app's log grew {grew_mb:.1f} MB"]
    return row, missed + [f"  {r.error[:200]}" for r in asked if r.error][:3]


def rss_mb(pid: int) -> float:
    """The resident memory of a process, in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def peak_memory(pid: int) -> Iterator[list[float]]:
    """The most resident memory the process held while the block ran, in MB (`peak[0]`, filled in as it runs)."""
    peak, done = [rss_mb(pid)], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


SETTLE_S, SETTLED_CEILING_MB = 120.0, 2048  # after a flood, the app's memory within this, that long after


def settled_memory(url: str, pid: int) -> float:
    """The app's resident memory SETTLE_S after a flood, while a page-less visitor asks for its info now and then
    (a request through the door, as a visitor's would be)."""
    import httpx

    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}gradio_api/info", timeout=10)
        except httpx.HTTPError:
            pass
        time.sleep(5.0)
    return rss_mb(pid)


def big_body(url: str, model: str, pid: int) -> dict:
    """Post one BODY_MB body (a Fill-mask question whose text is that long) with its Content-Length, sampling the
    app's memory meanwhile: how long until the answer (the refusal, or the answer on the event stream of a body
    that was taken), what it said, and the memory before, at its peak and 5 s after."""
    import httpx

    body = json.dumps({"data": [model, "final", "x" * (BODY_MB * 2**20), 5, []]}).encode()
    before = rss_mb(pid)
    with peak_memory(pid) as peak:
        started = time.perf_counter()
        try:
            response = httpx.post(f"{url}gradio_api/call/fill_mask", content=body, timeout=300,
                                  headers={"content-type": "application/json"})
            said = f"HTTP {response.status_code}: {response.text[:160]}"
            if response.status_code == 200:  # taken: the answer comes on the event stream
                answer = httpx.get(f"{url}gradio_api/call/fill_mask/{response.json()['event_id']}", timeout=300)
                said = f"taken, then on its event stream: {' '.join(answer.text.split())[:160]}"
        except Exception as exc:  # noqa: BLE001  a closed connection is an answer too
            said = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
        time.sleep(5.0)
    return {"seconds": seconds, "said": said, "before": before, "peak": peak[0], "after": rss_mb(pid)}


def run_posts(url: str) -> tuple[list[str], str]:
    """Issue 63's five `POST /gradio_api/run/train` from one address (each a run of 1,000 tiny steps on wiki), then
    one from another address: what each was told (its first status, or the refusal)."""
    import httpx

    parameters = httpx.get(f"{url}gradio_api/info").json()["named_endpoints"]["/train"]["parameters"]
    run = [["wiki"], None, "tiny", 1000, 4, 1e-3, 32, 512]
    run += [parameter["parameter_default"] for parameter in parameters[len(run):]]

    def post(address: str) -> str:
        answer = httpx.post(f"{url}gradio_api/run/train", json={"data": run}, timeout=300,
                            headers={"X-Forwarded-For": address})
        body = answer.json()
        return str(body["data"][0]) if answer.status_code == 200 else f"refused: {body.get('error', body)}"
    return [post(FLOOD_FROM) for _ in range(5)], post(VISITOR_FROM)


def floods(args: argparse.Namespace) -> int:
    """Issue 51's, 58's and 63's floods, the big body and the run posts against `python app.py` from
    `args.app_root`, with the verdict on each."""
    from tests.app.stand_in_hub import StandInHub

    model_name, problems, rows = f"checkpoints/{args.model.name}", [], []
    with tempfile.TemporaryDirectory() as tmp, StandInHub(SERVED_BY_HUB, args.hub_mb_s * 2**20) as hub:
        url, process, log = launch(args.model.resolve(), Path(tmp), args.app_root.resolve(), hub.url)
        try:
            warm_up(url, model_name)
            alone = [Request(0, "/fill_mask", inputs_for(0, 3 * i, model_name)[1]) for i in range(5)]
            for request in alone:
                started = time.perf_counter()
                HttpClient(url, VISITOR_FROM).predict(*request.inputs, api_name="/fill_mask")
                request.seconds = time.perf_counter() - started
            for kind in args.kinds:
                logged = log.stat().st_size
                with peak_memory(process.pid) as peak:
                    got, asked = flood(url, kind, model_name, args.flood_threads, args.flood_s)
                grew_mb = (log.stat().st_size - logged) / 2**20
                after = settled_memory(url, process.pid)
                row, missed = flood_row(kind, got, asked, grew_mb)
                rows.append([*row[:-1], f"{peak[0]:.0f}", f"{after:.0f}", f"{os.getloadavg()[0]:.1f}", row[-1]])
                problems += missed
                if peak[0] > MEMORY_CEILING_MB:
                    problems.append(f"{kind}: the app held {peak[0]:.0f} MB, past its {MEMORY_CEILING_MB} MB")
                if after > SETTLED_CEILING_MB:
                    problems.append(f"{kind}: the app still held {after:.0f} MB {SETTLE_S:g} s after, past "
                                    f"{SETTLED_CEILING_MB} MB")
            body = big_body(url, model_name, process.pid)
            flooded, elsewhere = run_posts(url)
            hub_cache = sum(f.stat().st_size for f in (Path(tmp) / "hub-cache").rglob("*")
                            if f.is_file() and not f.is_symlink())  # a snapshot links to its blobs
        finally:
            process.terminate()
            process.wait(30)
    print(f"{args.flood_threads} threads from one address for {args.flood_s:g} s a flood, while another visitor asked "
          f"Fill-mask once a second; that visitor's Fill-mask alone: {', '.join(f'{r.seconds:.2f}' for r in alone)} s")
    print_table(["flood", "flood answered", "flood refused", "flood failed", "other answered", "other p50 s",
                 "other max s", "log grew MB", "app peak MB", f"MB {SETTLE_S:g} s after", "load",
                 f"all answered in {OTHERS_TARGET_S:g} s, log +{LOG_TARGET_MB:g} MB"], rows)
    grew = body["after"] - body["before"]
    body_met = body["seconds"] <= BODY_TARGET_S and max(grew, body["peak"] - body["before"]) < BODY_GROWTH_MB
    print(f"a {BODY_MB} MB body: answered in {body['seconds']:.2f} s ({body['said']}); the app's memory "
          f"{body['before']:.0f} MB before, {body['peak']:.0f} MB at its peak, {body['after']:.0f} MB 5 s after "
          f"(target: refused within {BODY_TARGET_S:g} s, growing less than {BODY_GROWTH_MB} MB): "
          f"{'met' if body_met else 'NOT met'}")
    problems += [] if body_met else [f"the {BODY_MB} MB body: {body['seconds']:.1f} s, +{grew:.0f} MB after"]
    taken = not elsewhere.startswith("refused")
    print(f"five /run/train posts from one address were told: {'; '.join(said[:90] for said in flooded)}")
    print(f"then another address's run: {elsewhere[:160]} (target: taken): {'met' if taken else 'NOT met'}")
    problems += [] if taken else ["another address's run was refused after five /run/train posts from one address"]
    print(f"the hub cache held {hub_cache / 2**20:.0f} MB at the end ({len(hub.downloads)} downloads of "
          f"{SERVED_BY_HUB.name}'s weights, {hub.most} at once at most)")
    print(f"problems: {len(problems)}")
    for line in problems:
        print("  ", line)
    return 1 if problems else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--requests", type=int, default=6, help="requests per user")
    p.add_argument("--model", type=Path, default=ROOT / "checkpoints" / "mini-english")
    p.add_argument("--client", choices=["gradio", "http"], default="gradio",
                   help="the users' client: gradio_client, or gradio's plain HTTP API (far less CPU on this machine)")
    p.add_argument("--floods", action="store_true", help="issues 51, 58 and 63's floods, a 60 MB body and five run "
                   "posts")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=KINDS, metavar="KIND",
                   help=f"the floods to send, of {', '.join(KINDS)} (default: all)")
    p.add_argument("--flood-threads", type=int, default=30, help="threads of each flood")
    p.add_argument("--flood-s", type=float, default=20.0, help="seconds each flood lasts")
    p.add_argument("--app-root", type=Path, default=ROOT, help="the checkout whose app.py is started")
    p.add_argument("--hub-mb-s", type=float, default=10.0, help="how fast the stand-in hub sends a model's weights")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.floods:
        return floods(args)
    from bert_demo.checkpoint import load_pretrained

    model_name = f"checkpoints/{args.model.name}"
    with tempfile.TemporaryDirectory() as tmp:
        url, process, log = launch(args.model.resolve(), Path(tmp), args.app_root.resolve())
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
