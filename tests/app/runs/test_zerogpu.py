"""ZeroGPU's contract, held without ZeroGPU (`pytest -k zerogpu`): runs train inside a GPU call made as `spaces` makes
it there (tests/app/runs/zerogpu_harness.py: a forked, reused worker; pickled arguments and messages; a duration asked
first that bounds the call), while the app's own process, where torch says CUDA is available, never initialises it; each
call is charged as the real `spaces` charges it; and, where torch is a CUDA build (the real `spaces` refuses a CPU one),
the app runs under the real `spaces` beside a stand-in for ZeroGPU's device API (tests/app/runs/zerogpu_space.py,
tests/app/runs/zerogpu_device_api.py)."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from bert_demo.app.policy import APP_GPU_RUN, FORM
from bert_demo.app.runs import gpu_call, zerogpu
from bert_demo.app.runs.gpu_call import call_seconds, train_call
from bert_demo.app.runs.zerogpu import duration
from bert_demo.app.registry import Registry
from bert_demo.config import read_metadata
from bert_demo.training.settings import FinetuneConfig, TrainConfig
from tests.app.runs.zerogpu_device_api import DeviceAPI
from tests.app.runs.zerogpu_harness import ForkedGPU, GPUError, ZeroGPUTorch
from tests.conftest import free_port, import_or_skip, wait_until

MODEL = "checkpoints/tiny-test"
OWNER = "visitor-zerogpu"
ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "checkpoints"
LONGEST = TrainConfig(preset="base", steps=20_000, batch_size=64, seq_len=512)  # a run longer than any call


@pytest.fixture
def zerogpu_torch():
    """This process looks as ZeroGPU makes the app's look (CUDA available, none to initialise), until the test
    ends; a GPU call's worker undoes it, as spaces does."""
    patched = ZeroGPUTorch()
    patched.patch()
    yield patched
    patched.unpatch()


def gpu(zerogpu_torch: ZeroGPUTorch, **options) -> ForkedGPU:
    return ForkedGPU(train_call, options.pop("duration", duration), in_worker=zerogpu_torch.in_worker)


def far_off(patch: pytest.MonkeyPatch) -> None:
    """Calls as long as ZeroGPU allows (300 s): a run's own end stays far off, however busy the machine (a worker
    forked after this holds it)."""
    patch.setenv(gpu_call.MAX_CALL_ENV, "300")
    patch.setattr(gpu_call, "SETUP_S", 300)


def zerogpu_registry(roots, call: ForkedGPU) -> Registry:
    return Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=False, gpu_call=call)


def train(registry: Registry, corpus, steps: int, batch_size: int = 4, owner: str = OWNER):
    """A tiny run on a small text, through the slot's line as a visitor's click starts it; its job once started."""
    ticket = registry.join_line(owner=owner, corpus=[], upload=str(corpus), preset="tiny", steps=steps,
                                batch_size=batch_size, lr=1e-3, seq_len=32, vocab_size=512)
    job = ticket.wait_for_run(1, timeout=30)
    assert job is not None, ticket.error
    return job


# the harness does what spaces does

def _count(n: int, pause: float = 0.0):
    for i in range(n):
        time.sleep(pause)
        yield i


def test_zerogpu_harness_asks_the_duration_first_and_aborts_a_call_past_it():
    call = ForkedGPU(_count, duration=lambda n, pause=0.0: 1 + n * pause / 10)
    assert list(call(3)) == [0, 1, 2] and call.durations == [1.0]
    with pytest.raises(GPUError, match="GPU task aborted"):
        list(call(50, pause=0.1))  # 5 s of work, 1.5 s allowed
    assert call.durations == [1.0, 1.5]


def test_zerogpu_harness_reuses_a_worker_forked_before_the_app_changed_and_pickles_what_crosses():
    state = {"changed": False}

    def task(seen_by_argument):
        yield state["changed"], seen_by_argument

    call = ForkedGPU(task, duration=lambda *args: 10)
    call.fork_now()
    state["changed"] = True
    assert list(call(True)) == [(False, True)]  # the worker holds the memory of its fork; the argument travels
    assert list(call(True)) == [(False, True)] and call.workers_forked == 1
    with pytest.raises(TypeError, match="cannot pickle"):
        list(call(threading.Lock()))


# how long a call asks for

def test_zerogpu_a_call_asks_for_the_time_its_settings_need_within_the_cap(monkeypatch):
    small = TrainConfig(preset="tiny", steps=100, batch_size=32, seq_len=128)
    larger = TrainConfig(**{**APP_GPU_RUN, "corpus": "wiki"})
    assert gpu_call.SETUP_S < call_seconds(small) < call_seconds(larger) <= 60
    assert call_seconds(LONGEST) == gpu_call.max_call_seconds()
    monkeypatch.setenv(gpu_call.MAX_CALL_ENV, "45")
    assert call_seconds(larger) == 45
    monkeypatch.setenv(gpu_call.MAX_CALL_ENV, "a minute")
    with pytest.raises(ValueError, match="whole number of seconds"):
        call_seconds(larger)


def spaces_cards() -> list[dict]:
    """The GPUs `spaces` knows, each with the factor it multiplies a call's length by (its spaces/zero/configs.json)."""
    from importlib.resources import files

    config = import_or_skip("spaces.zero.config")
    return json.loads(files("spaces.zero").joinpath(config.CONFIGS_FILENAME).read_text())


def asked_of_zerogpu(config: TrainConfig | FinetuneConfig) -> int:
    """The seconds the real `spaces` asks ZeroGPU's scheduler for, for a run's call: the length the app's duration
    function gives, through `spaces.zero.client.get_duration_seconds`, rounded as `schedule` rounds it."""
    from spaces.zero.client import get_duration_seconds

    return round(get_duration_seconds(timedelta(seconds=duration(config)), None))


def test_zerogpu_no_call_of_the_default_run_or_experiment_asks_for_more_than_a_visitors_quota_once_multiplied(
        tmp_path, monkeypatch, zerogpu_torch):
    gr = import_or_skip("gradio")
    from bert_demo.app.tabs import finetune, train

    registry = Registry(checkpoints_dir=SHIPPED, runs_dir=tmp_path, allow_hub=False, gpu_call=gpu(zerogpu_torch))
    with gr.Blocks():
        page = {**train.layout(registry), **finetune.layout(registry)}  # the forms as the page opens them
    form = {name: page[name].value for name in FORM}
    tune = [page[name].value for name in ("ft_model", "ft_task", "ft_upload", "ft_labels", "ft_compare")]
    run = registry.forms.train_config(**form)
    experiment = {start: registry.forms.finetune_config(tune[0], tune[1], int(tune[3]), start)
                  for start in ("pretrained", *tune[4])}
    calls = {"the default run": run, **{f"the experiment's {start} run": c for start, c in experiment.items()},
             "a call at the cap": LONGEST}
    for card in spaces_cards():
        monkeypatch.setattr("spaces.zero.config.get_config", lambda card=card: card)
        for what, config in calls.items():
            assert asked_of_zerogpu(config) <= gpu_call.VISITOR_QUOTA_S, f"{what} on an {card['model']}"
            assert gpu_call.charged_seconds(config) == asked_of_zerogpu(config), f"{what} on an {card['model']}"
        line = train.estimate(registry, **form)["estimate"]
        charged = asked_of_zerogpu(run)
        assert f"counted as {charged} s**" in line and f"{gpu_call.VISITOR_QUOTA_S // charged} without a" in line
        line = finetune.estimate(registry, *tune)["ft_estimate"]
        charged = sum(map(asked_of_zerogpu, experiment.values()))
        assert f"counted as {charged} s**" in line and f"{gpu_call.VISITOR_QUOTA_S // charged} without a" in line


def test_zerogpu_where_spaces_cannot_be_imported_a_call_is_charged_at_least_as_on_any_gpu_it_knows(monkeypatch):
    largest = max(card["duration_factor"] for card in spaces_cards())
    monkeypatch.setitem(sys.modules, "spaces.zero", None)  # as where spaces is not installed
    assert gpu_call.duration_factor() == gpu_call.FALLBACK_FACTOR >= largest
    assert gpu_call.charged_seconds(LONGEST) <= gpu_call.VISITOR_QUOTA_S


def test_zerogpu_a_named_corpus_is_read_on_the_cpu_before_the_call_and_an_upload_inside_it(monkeypatch, tmp_path):
    prepared, calls = [], []
    monkeypatch.setattr("bert_demo.training.pretraining.prepare_data", lambda config: prepared.append(config.corpus))

    def call(config, *arguments):
        calls.append((config.corpus, list(prepared)))
        yield "record", {"kind": "done", "reason": "finished", "step": 0, "checkpoint": None, "message": None}

    for corpus in ("news,wiki", str(tmp_path / "upload.txt")):
        config = TrainConfig(corpus=corpus, out=str(tmp_path / "run"))
        records = list(zerogpu.GPUCallTrainer(config, call).run())
        assert records[-1]["kind"] == "done"
    assert calls == [("news,wiki", ["news,wiki"]), (str(tmp_path / "upload.txt"), ["news,wiki"])]


# runs through the slot, as visitors start them

def test_zerogpu_a_call_stops_its_run_when_its_time_is_nearly_up_or_the_app_asks(tmp_path):
    class Run:
        stopped = 0

        def stop(self):
            self.stopped += 1

    def soon(condition) -> bool:
        deadline = time.monotonic() + 10
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        return condition()

    early, late, asked, stop_file = Run(), Run(), Run(), tmp_path / "stop"
    with gpu_call._Watch(early, stop_file, deadline=time.monotonic() + 30) as watch:
        time.sleep(0.3)
        assert not early.stopped and watch.reason is None
    with gpu_call._Watch(late, stop_file, deadline=time.monotonic()) as watch:
        assert soon(lambda: late.stopped) and "time is nearly up" in watch.reason
    with gpu_call._Watch(asked, stop_file, deadline=time.monotonic() + 30) as watch:
        stop_file.touch()
        assert soon(lambda: asked.stopped) and watch.reason.startswith("stopped as you asked")
    assert late.stopped == asked.stopped == 1  # each told once


def test_zerogpu_a_call_cut_mid_run_leaves_the_weights_that_came_back_saved(roots, write_corpus, tmp_path,
                                                                          monkeypatch, zerogpu_torch):
    monkeypatch.setattr(gpu_call, "LIVE_EVERY_S", 0.2)
    far_off(monkeypatch)
    call = gpu(zerogpu_torch)
    registry = zerogpu_registry(roots, call)
    job = train(registry, write_corpus(tmp_path / "corpus.txt"), steps=1000)  # a record every 20 steps
    while job.running and (job.trainer._weights is None or job.trainer.step < 20):
        time.sleep(0.05)
    assert job.live_weights()[0] is not None  # the run in progress answers from the weights that came back
    call.kill()  # as ZeroGPU ends a call past its duration
    job.thread.join(timeout=60)
    done = job.done
    assert done["reason"] == "stopped" and done["checkpoint"], done
    assert "GPU task aborted" in done["message"] and "the app saved the weights of step" in done["message"]
    saved = read_metadata(done["checkpoint"])
    assert 0 < saved["step"] <= done["step"] < 1000 and saved["visible_to"] == OWNER
    assert saved["training_words"] == job.trainer.training_words > 0  # the words the call's run counted, kept too
    assert not zerogpu_torch.attempts and not torch.cuda.is_initialized()


def test_zerogpu_a_refused_call_tells_the_visitor_why_and_leaves_nothing(roots, write_corpus, tmp_path,
                                                                         zerogpu_torch):
    call = gpu(zerogpu_torch)
    call.refuse_next("You have exceeded your free ZeroGPU quota (60s requested vs. 12s left). Try again in 0:05:00.")
    registry = zerogpu_registry(roots, call)
    job = train(registry, write_corpus(tmp_path / "corpus.txt"), steps=20)
    job.thread.join(timeout=60)
    assert job.done["reason"] == "error" and not job.done["checkpoint"]
    assert "ZeroGPU quota exceeded: You have exceeded your free ZeroGPU quota (60s requested vs. 12s left)" \
        in job.done["message"]  # ZeroGPU's words, titled as it titles them
    assert not (roots["runs"] / job.name).exists()


def test_zerogpu_stop_reaches_the_call_and_the_run_saves(roots, write_corpus, tmp_path, monkeypatch, zerogpu_torch):
    far_off(monkeypatch)
    registry = zerogpu_registry(roots, gpu(zerogpu_torch))
    job = train(registry, write_corpus(tmp_path / "corpus.txt"), steps=1000)
    while job.trainer.step < 20 and job.running:
        time.sleep(0.05)
    assert registry.slot.stop(OWNER)
    job.thread.join(timeout=60)
    assert job.done["reason"] == "stopped" and job.done["checkpoint"] and job.done["step"] < 1000


# through the page's API, as on a Space

@pytest.fixture(scope="module")
def space(served_app, tmp_path_factory):
    """The app served as on a ZeroGPU Space: its process patched as spaces patches it, its GPU worker forked after
    the app had computed on the CPU and before it was built (gradio, which a lent GPU machine lacks, is needed
    here)."""
    import_or_skip("gradio_client")
    patched = ZeroGPUTorch()
    patched.patch()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    torch.randn(1000, 1000).exp().sum()  # the app's answers start OpenMP's threads before spaces forks its worker
    torch.set_num_threads(threads)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gpu_call, "SETUP_S", 110)  # calls of two minutes, for a busy machine (before the fork)
        call = ForkedGPU(train_call, duration, in_worker=patched.in_worker)
        call.fork_now()
        try:
            with served_app(tmp_path_factory.mktemp("space"), gpu_call=call) as served:
                yield {**served, "call": call, "torch": patched}
        finally:
            patched.unpatch()
            call.kill()


def test_zerogpu_a_run_and_a_fine_tune_go_from_start_to_models_that_answer_with_no_cuda_in_the_app(space,
                                                                                                 short_finetune):
    from gradio_client import Client, handle_file

    client = Client(space["url"], verbose=False)
    outputs = list(client.submit([], handle_file(str(space["corpus"])), "tiny", 20, 4, 1e-3, 32, 512,
                                 api_name="/train"))[-1]
    status, selector = outputs[0], outputs[6]
    assert status.startswith("Finished 20 steps"), status
    run = next(name for _, name in selector["choices"] if name.startswith("runs/tiny-upload-"))
    sentence, *_ = client.predict(model_name=run, sentence="the [MASK] was visited.", top_k=3, api_name="/fill_mask")
    assert sentence["value"][1]["class_or_confidence"]

    outputs = list(client.submit(MODEL, "movie-reviews", handle_file(str(short_finetune)), "100", ["random"],
                                 api_name="/finetune"))[-1]
    status, classifier = outputs[0], outputs[5]  # (Stop and Start are no API outputs)
    assert status.startswith("Done: 2 runs of 4 steps"), status
    probabilities = client.predict(classifier["value"], "the cat was happy.", "", api_name="/classify")
    assert {c["label"] for c in probabilities["confidences"]} == {"no", "yes"}

    assert len(space["call"].durations) == 3 and space["call"].workers_forked == 1  # one call a run, one worker
    assert not space["torch"].attempts and not torch.cuda.is_initialized()
    assert zerogpu.GPU_TRAINING is None  # off the Space, spaces's decorator is never applied


# with the real `spaces`, as on a Space: where torch is a CUDA build, as ZeroGPU's (PyPI's torch 2.11 runs on a CPU)

needs_cuda_build = pytest.mark.skipif(
    torch.version.cuda is None, reason="the real spaces needs a CUDA build of torch, as ZeroGPU's, and fails on import "
                                       "with this CPU-only one: a venv with PyPI's torch 2.11.0 runs these tests")
IP_TOKEN = ".".join(base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
                    for part in ({"alg": "none"}, {}, "signature"))  # a visitor's token as Spaces forwards it

REAL_SPACES = """
import app, torch
from bert_demo.app.runs import zerogpu
from bert_demo import inference
registry = app.registry
loaded = registry.catalog.load(registry.catalog.default_model())
guesses = inference.fill_mask(loaded.model, loaded.tokenizer, "the cat sat on the [MASK].", top_k=3)
print(hasattr(zerogpu.GPU_TRAINING, "zerogpu"), registry.slot.gpu_call is zerogpu.GPU_TRAINING, registry.device,
      registry.forms.run_device(), registry.caps.machine, len(guesses[0]), torch.cuda.is_available(),
      torch.cuda.is_initialized())
"""


def test_zerogpu_the_device_api_stand_in_answers_as_spaces_own_client_reads_it():
    import httpx

    zerogpu_api = import_or_skip("spaces.zero.api")
    with DeviceAPI() as api:
        client = zerogpu_api.APIClient(httpx.Client(base_url=api.url, timeout=30))
        assert client.startup_report() == 200
        first, meta = client.schedule(cgroup_path="/", task_id=1, duration_seconds=90)
        assert isinstance(first, zerogpu_api.ScheduleResponse) and first.idle and meta.auth is None
        second, _ = client.schedule(cgroup_path="/", task_id=1, duration_seconds=90)
        assert not second.idle and second.allowToken != first.allowToken  # the GPU is held by the first call
        assert client.allow(allow_token=first.allowToken, pid=4321) == 200
        assert client.allow(allow_token="never-given", pid=4321) == 404
        assert [client.release(allow_token=first.allowToken) for _ in range(2)] == [200, 404]
        api.left, api.auth = 30, "regular"
        refused, meta = client.schedule(cgroup_path="/", task_id=1, duration_seconds=90)
        assert refused == zerogpu_api.QuotaInfos(left=30, wait=timedelta(seconds=300)) and meta.auth == "regular"
        assert client.get_queue_size() == 0
    assert [path for _, path, _ in api.requests].count("/schedule") == 3


@needs_cuda_build
def test_zerogpu_on_a_space_the_real_spaces_wraps_the_call_and_the_app_answers_on_the_cpu(tmp_path):
    import_or_skip("spaces")  # and gradio, which it imports (a lent GPU machine has neither)
    env = {**os.environ, "SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": "http://127.0.0.1:1",
           "BERT_DEMO_HUB": "0", "BERT_DEMO_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-c", REAL_SPACES], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "cpu", "cuda", "gpu", "3", "True", "False"]


@pytest.fixture(scope="module")
def real_space(tmp_path_factory, make_checkpoint, write_corpus):
    """The app served under the real `spaces` (tests/app/runs/zerogpu_space.py: on a machine without a GPU, only the GPU
    call's CUDA start and its run's device replaced), over a tiny checkpoint, beside a stand-in for ZeroGPU's device
    API on loopback (tests/app/runs/zerogpu_device_api.py); ended with the module."""
    import_or_skip("spaces")  # and gradio, which it imports (a lent GPU machine has neither)
    import_or_skip("gradio_client")
    base = tmp_path_factory.mktemp("real-space")
    make_checkpoint(base / "checkpoints" / "tiny-test")
    url = f"http://127.0.0.1:{free_port()}/"
    with DeviceAPI() as api, (base / "app.log").open("w") as log:
        env = {**os.environ, "SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": api.url, "BERT_DEMO_HUB": "0",
               "BERT_DEMO_CHECKPOINTS": str(base / "checkpoints"), "BERT_DEMO_RUNS": str(base / "runs"),
               "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": url.rsplit(":", 1)[1].strip("/")}
        app = subprocess.Popen([sys.executable, "-m", "tests.app.runs.zerogpu_space", str(base / "report.json")],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        space = {"url": url, "api": api, "app": app, "base": base, "corpus": write_corpus(base / "corpus.txt")}
        try:
            wait_until(lambda: app.poll() is not None or serves(url), "the app under the real spaces to serve",
                       timeout=300)
            assert app.poll() is None, f"the app under the real spaces ended: {app_log(space)}"
            yield space
        finally:
            app.terminate()
            app.wait(timeout=60)


def serves(url: str) -> bool:
    """Whether the page at `url` answers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as page:
            return page.status == 200
    except (urllib.error.URLError, OSError):
        return False


def app_log(space: dict, chars: int = 3000) -> str:
    """The end of what the app's process printed, for a failed assertion to show."""
    return (space["base"] / "app.log").read_text()[-chars:]


def app_report(space: dict) -> dict:
    """What the app's process says of itself now: the attempts to initialise CUDA there, and whether it is
    (tests/app/runs/zerogpu_space.py writes it on SIGUSR1)."""
    report = space["base"] / "report.json"
    report.unlink(missing_ok=True)
    space["app"].send_signal(signal.SIGUSR1)
    wait_until(report.exists, "the app's report")
    return json.loads(report.read_text())


@needs_cuda_build
def test_zerogpu_real_spaces_a_run_and_a_fine_tune_go_from_start_to_models_that_answer_with_no_cuda_in_the_app(
        real_space, tmp_path):
    from gradio_client import Client, handle_file

    api = real_space["api"]
    earlier = len(api.requests)
    client = Client(real_space["url"], verbose=False)
    outputs = list(client.submit([], handle_file(str(real_space["corpus"])), "tiny", 20, 4, 1e-3, 32, 512,
                                 api_name="/train"))[-1]
    status, selector = outputs[0], outputs[6]
    assert "Saved as runs/tiny-upload-" in status, f"{status}\n{app_log(real_space)}"  # finished, or stopped in time
    run = next(name for _, name in selector["choices"] if name.startswith("runs/tiny-upload-"))
    sentence, *_ = client.predict(model_name=run, sentence="the [MASK] was visited.", top_k=3, api_name="/fill_mask")
    assert sentence["value"][1]["class_or_confidence"]

    labelled = tmp_path / "mine.jsonl"
    labelled.write_text("\n".join(json.dumps({"text": f"the cat was {'happy' if i % 2 else 'sad'}.",
                                               "label": "yes" if i % 2 else "no"}) for i in range(60)))
    outputs = list(client.submit(MODEL, "movie-reviews", handle_file(str(labelled)), "100", ["random"],
                                 api_name="/finetune"))[-1]
    status, classifier = outputs[0], outputs[5]
    assert status.startswith("Done: 2 runs of"), f"{status}\n{app_log(real_space)}"
    probabilities = client.predict(classifier["value"], "the cat was happy.", "", api_name="/classify")
    assert {c["label"] for c in probabilities["confidences"]} == {"no", "yes"}  # a classifier answers here, not
    # in Fill-mask: it has no masked-LM head

    asked = api.requests[earlier:]
    scheduled = [params for _, path, params in asked if path == "/schedule"]
    released = [params["fail"] for _, path, params in asked if path == "/release"]
    assert api.asked("/startup-report") and len(scheduled) == 3  # one call a run
    assert released == ["false"] * 3 and not api.allowed  # each call ended and gave its GPU back
    assert all(int(a["pid"]) != real_space["app"].pid for a in api.asked("/allow"))  # the GPU went to a worker
    report = app_report(real_space)
    assert not report["cuda_attempts"] and not report["cuda_initialized"], report["cuda_attempts"][:1]


@needs_cuda_build
def test_zerogpu_real_spaces_a_refusal_reaches_the_visitor_in_zerogpus_words_and_leaves_nothing(real_space):
    from gradio_client import Client, handle_file

    api, runs = real_space["api"], real_space["base"] / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    api.left, api.auth = 5, "regular"  # a visitor with a free account and 5 s left today
    try:
        client = Client(real_space["url"], verbose=False, headers={"X-IP-Token": IP_TOKEN})
        status = list(client.submit([], handle_file(str(real_space["corpus"])), "tiny", 20, 4, 1e-3, 32, 512,
                                    api_name="/train"))[-1][0]
    finally:
        api.left, api.auth = None, None
    asked = api.asked("/schedule")[-1]["durationSeconds"]
    assert (f"ZeroGPU quota exceeded: You have exceeded your free ZeroGPU quota ({asked}s requested vs. 5s left). "
            "Try again in 0:05:00.") in status, f"{status}\n{app_log(real_space)}"
    assert (set(runs.iterdir()) if runs.exists() else set()) == before


# what the page says before Start

def test_zerogpu_the_train_and_fine_tune_tabs_say_each_calls_length_before_start_and_time_nothing_here(
        roots, monkeypatch, zerogpu_torch):
    import_or_skip("gradio")  # the tabs' (a lent GPU machine has none)
    from bert_demo.app.runs import estimates
    from bert_demo.app.tabs import finetune, train

    monkeypatch.setattr(estimates, "pace", lambda shape: pytest.fail("a pace was timed in the app's process"))
    registry = zerogpu_registry(roots, gpu(zerogpu_torch))
    line = train.estimate(registry, **{k: APP_GPU_RUN[k] for k in ("preset", "steps", "batch_size", "seq_len",
                                                                    "vocab_size")})["estimate"]
    seconds = call_seconds(registry.forms.train_config())
    assert f"a GPU call of up to {seconds} s on ZeroGPU" in line and "20 M" in line
    assert all(who in line for who, _ in estimates.QUOTAS) and "Such runs a day" in line
    line = finetune.estimate(registry, MODEL, "movie-reviews", None, "100", ["random"])["ft_estimate"]
    assert "2 GPU calls of up to" in line and "2 runs of" in line and "Such experiments a day" in line
    assert not zerogpu_torch.attempts


def test_zerogpu_the_train_form_opens_on_the_gpus_default_run_and_says_where_runs_train(roots, zerogpu_torch):
    gr = import_or_skip("gradio")
    from bert_demo.app.tabs import train

    registry = zerogpu_registry(roots, gpu(zerogpu_torch))
    with gr.Blocks() as page:
        components = train.layout(registry)
    assert {name: components[name].value for name in ("preset", "steps", "batch_size")} == \
        {name: APP_GPU_RUN[name] for name in ("preset", "steps", "batch_size")}
    assert "Limits on this machine (ZeroGPU: each run in a GPU call)" in json.dumps(page.get_config_file())
