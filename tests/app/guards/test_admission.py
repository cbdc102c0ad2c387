"""bert_demo/app/guards/admission.py: each kind of question waits in its own line, a full line refuses at once with when
to try again, the heavy kinds share one cap, one visitor, by session and by address, cannot hold more than their
share of open questions or of a line, and a line serves its addresses in turn."""
from __future__ import annotations

import asyncio

import pytest

from bert_demo.app.guards.admission import SHARES, Admission, Refused, Share, cores, kind_of
from bert_demo.app.visitors import Visitor, network_of


async def asked(admission: Admission, name: str, visitor: str | None, done: asyncio.Event, log: list) -> None:
    """A question that is answered once `done` is set; `log` records when it started and how it ended."""
    try:
        async with admission.admit(name, visitor):
            log.append(("answering", name, visitor))
            await done.wait()
        log.append(("answered", name, visitor))
    except Refused as refusal:
        log.append(("refused", name, str(refusal)))


def run(scenario) -> list:
    async def main() -> list:
        log: list = []
        await scenario(log)
        return log
    return asyncio.run(main())


def test_a_full_line_refuses_at_once_while_another_kind_of_question_is_still_answered():
    admission = Admission({"slow": Share(running=2, waiting=1)})

    async def scenario(log):
        slow_done, fast_done = asyncio.Event(), asyncio.Event()
        slow = [asyncio.create_task(asked(admission, "slow", f"v{i}", slow_done, log)) for i in range(5)]
        await asyncio.sleep(0.01)
        assert [entry[0] for entry in log].count("answering") == 2  # two answered, one waits, two refused
        assert [entry[0] for entry in log].count("refused") == 2
        fast_done.set()
        await asked(admission, "fast", "someone else", fast_done, log)  # its own line: not behind the slow ones
        slow_done.set()
        await asyncio.gather(*slow)

    log = run(scenario)
    assert ("answered", "fast", "someone else") in log
    assert [entry[0] for entry in log if entry[1] == "slow"].count("answered") == 3
    refusal = next(entry[2] for entry in log if entry[0] == "refused")
    assert "2 questions of this kind are being answered and 1 more is waiting" in refusal
    assert "try again in about" in refusal


def test_the_wait_said_grows_with_the_line_and_the_time_its_answers_took():
    admission = Admission({"slow": Share(running=1, waiting=0)})
    line = admission.line("slow")
    line._seconds.extend([4.0, 5.0, 6.0])
    assert line.wait_s() == 5  # nobody in line: one answer's time
    line.running = 1
    assert line.wait_s() == 10  # one ahead, then this one


def test_one_visitor_has_at_most_max_open_questions_open_and_the_next_is_refused():
    admission = Admission(max_open=2)

    async def scenario(log):
        done = asyncio.Event()
        mine = [asyncio.create_task(asked(admission, f"kind{i}", "me", done, log)) for i in range(3)]
        await asyncio.sleep(0.01)
        other = asyncio.create_task(asked(admission, "kind0", "you", done, log))
        await asyncio.sleep(0.01)
        done.set()
        await asyncio.gather(*mine, other)

    log = run(scenario)
    refused = [entry for entry in log if entry[0] == "refused"]
    assert len(refused) == 1 and "you have 2 questions still being answered" in refused[0][2]
    assert ("answered", "kind0", "you") in log
    assert admission.open == {}  # every place given back


def test_a_question_that_fails_gives_its_places_back():
    admission = Admission({"slow": Share(running=1, waiting=0)}, max_open=1)

    async def scenario(log):
        with pytest.raises(RuntimeError):
            async with admission.admit("slow", "me"):
                raise RuntimeError("the model broke")
        async with admission.admit("slow", "me"):
            log.append("answered after the failure")

    assert run(scenario) == ["answered after the failure"]


def test_one_address_holds_at_most_max_open_questions_across_its_sessions_and_the_next_wait_their_turn():
    """gradio's /call/ API makes a new session for every call: counted by address too, a flood from one address
    holds `max_open` places, a few more wait for them, the rest are refused, and another address is not slowed."""
    admission = Admission({"kind": Share(running=4, waiting=12)}, max_open=2, address_waiting=1)

    async def scenario(log):
        done = asyncio.Event()
        flood = [asyncio.create_task(asked(admission, "kind", Visitor(f"call-{i}", "93.184.216.34"), done, log))
                 for i in range(5)]
        await asyncio.sleep(0.01)
        assert [entry[0] for entry in log].count("answering") == 2
        assert admission.held_back == {"93.184.216.34": 1}
        other = asyncio.create_task(asked(admission, "kind", Visitor("other", "151.101.1.69"), done, log))
        await asyncio.sleep(0.01)
        assert ("answering", "kind", "other") in log  # another address: at once, the line has room
        done.set()
        await asyncio.gather(*flood, other)

    log = run(scenario)
    refused = [entry for entry in log if entry[0] == "refused"]
    assert len(refused) == 2 and all("your network has 2 questions being answered and 1 more waiting" in r[2]
                                     for r in refused)
    assert [entry[0] for entry in log].count("answered") == 4  # the two first, the one that waited, the other
    assert admission.open == {} and admission.held_back == {}


def test_one_visitor_holds_at_most_a_quarter_of_a_lines_places_by_session_and_by_address():
    admission = Admission({"kind": Share(running=2, waiting=6)})  # 8 places: 2 for one visitor

    async def scenario(log):
        done = asyncio.Event()
        mine = [asyncio.create_task(asked(admission, "kind", Visitor("me"), done, log)) for _ in range(3)]
        network = [asyncio.create_task(asked(admission, "kind", Visitor(f"s{i}", "93.184.216.34"), done, log))
                   for i in range(3)]
        await asyncio.sleep(0.01)
        assert admission.line("kind").held[("address", "93.184.216.34")] == 2
        assert admission.held_back == {"93.184.216.34": 1}  # the third of the address waits for its own
        done.set()
        await asyncio.gather(*mine, *network)

    log = run(scenario)
    refused = [entry for entry in log if entry[0] == "refused"]
    assert len(refused) == 1 and "you have 2 questions of this kind still being answered" in refused[0][2]
    assert [entry[0] for entry in log].count("answered") == 5


def test_heavy_kinds_share_one_cap_and_a_light_question_never_waits_for_it():
    admission = Admission({"attention": Share(heavy=True), "neighbours": Share(heavy=True)}, heavy_at_once=1)

    async def scenario(log):
        heavy_done, light_done = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(asked(admission, "attention", "a", heavy_done, log))
        second = asyncio.create_task(asked(admission, "neighbours", "b", heavy_done, log))
        await asyncio.sleep(0.01)
        assert [entry[1] for entry in log if entry[0] == "answering"] == ["attention"]  # the other kind waits
        assert admission.line("neighbours").waiting == 1
        light_done.set()
        await asked(admission, "fill_mask", "c", light_done, log)  # answered while the heavy cap is full
        heavy_done.set()
        await asyncio.gather(first, second)

    log = run(scenario)
    assert [entry[1] for entry in log if entry[0] == "answered"] == ["fill_mask", "attention", "neighbours"]


def test_a_heavy_line_behind_other_kinds_heavy_work_holds_no_more_waiting_than_its_cap():
    """A question that holds its line's place while it waits for the heavy cap counts as answered, not waiting: a
    line behind other kinds' heavy work holds no more waiting than its cap (head importance: 2 answered, 4
    waiting)."""
    admission = Admission({"importance": Share(running=2, waiting=4, heavy=True), "attention": Share(heavy=True)},
                          heavy_at_once=1)

    async def scenario(log):
        done, attention_done = asyncio.Event(), asyncio.Event()
        attention = asyncio.create_task(asked(admission, "attention", "a", attention_done, log))  # the heavy cap
        await asyncio.sleep(0.01)
        flood = [asyncio.create_task(asked(admission, "importance", f"v{i}", done, log)) for i in range(10)]
        await asyncio.sleep(0.01)
        line = admission.line("importance")
        assert (line.running, line.waiting) == (0, 4)
        attention_done.set()
        done.set()
        await asyncio.gather(attention, *flood)

    log = run(scenario)
    refusals = [entry[2] for entry in log if entry[0] == "refused"]
    assert len(refusals) == 6 and all(refusal.startswith("4 questions of this kind are waiting for the heavy "
                                                         "questions of other kinds, so the app can take no more of "
                                                         "them now") for refusal in refusals)
    assert [entry[1] for entry in log if entry[0] == "answered"].count("importance") == 4


def test_the_heavy_kinds_are_capped_near_the_cores_and_fill_mask_and_next_sentence_are_not_among_them():
    assert Admission().heavy_at_once == cores()
    heavy = {name for name, share in SHARES.items() if share.heavy}
    assert {"attention", "neuron", "neighbours", "importance", "attribution"} <= heavy
    assert not {"fill_mask", "next_sentence"} & heavy


def test_a_line_serves_its_addresses_in_turn_so_a_newcomer_waits_behind_one_question_of_each_other_address():
    """A line serves its addresses in turn, not first come first served: a newcomer waits behind one question of
    each other address, never behind all of theirs."""
    admission = Admission({"kind": Share(running=1, waiting=40)})
    answered: list[str] = []

    async def ask(name: str, address: str, go: asyncio.Event) -> None:
        async with admission.admit("kind", Visitor(name, address)):
            answered.append(name)
            await go.wait()

    async def scenario(log):
        go = asyncio.Event()
        asked = [asyncio.create_task(ask(f"{address}{i}", address, go)) for address in "ABC" for i in (1, 2, 3)]
        await asyncio.sleep(0.01)
        asked.append(asyncio.create_task(ask("X1", "X", go)))
        await asyncio.sleep(0.01)
        go.set()
        await asyncio.gather(*asked)

    run(scenario)
    assert answered == ["A1", "A2", "B1", "C1", "X1", "A3", "B2", "C2", "B3", "C3"]
    assert admission.lines["kind"].turns == {} and admission.open == {}


def test_a_question_over_a_long_text_waits_in_its_kinds_line_for_long_ones_and_short_ones_pass_it():
    """Five addresses asking Fill-mask of a 425-word text kept another visitor's short one waiting behind one of each
    (3.6 s at the median, 5.3 s at worst): a long question now waits in a line of its own, one at a time."""
    assert kind_of("fill_mask", ["checkpoints/m", "word " * 201, 5]) == "fill_mask, long"
    assert kind_of("fill_mask", ["checkpoints/m", "the [MASK] sat.", 5]) == "fill_mask"
    heavy = " ".join(["the [mask] walked past the old houses by the quiet river."] * 20)[:963]  # issue 69's flood
    assert len(heavy) == 963 and heavy.count("[mask]") == 17 and kind_of("fill_mask", [heavy]) == "fill_mask, long"
    assert kind_of("fill_mask", [heavy.replace("[mask]", "the")]) == "fill_mask"  # as long, without the [MASK]s
    admission = Admission(heavy_at_once=2)

    async def scenario(log):
        done, short_done = asyncio.Event(), asyncio.Event()
        long = "the cat sat on the [MASK]. " * 40
        flood = [asyncio.create_task(asked(admission, kind_of("fill_mask", [long]), Visitor(f"v{i}", f"9.9.9.{i}"),
                                           done, log)) for i in range(5)]
        await asyncio.sleep(0.01)
        assert [entry[0] for entry in log].count("answering") == 1  # one long question at a time
        short_done.set()
        await asked(admission, kind_of("fill_mask", ["the [MASK] sat."]), Visitor("x", "8.8.8.8"), short_done, log)
        done.set()
        await asyncio.gather(*flood)

    log = run(scenario)
    assert log.index(("answered", "fill_mask", Visitor("x", "8.8.8.8"))) < \
        log.index(next(entry for entry in log if entry[0] == "answered" and entry[1] == "fill_mask, long"))


def test_an_address_with_no_question_in_a_full_line_still_gets_a_place_and_only_it():
    admission = Admission({"kind": Share(running=1, waiting=1)})

    async def scenario(log):
        done = asyncio.Event()
        first = [asyncio.create_task(asked(admission, "kind", Visitor(name, address), done, log))
                 for name, address in (("a1", "93.184.216.34"), ("b1", "151.101.1.69"))]
        await asyncio.sleep(0.01)
        late = [asyncio.create_task(asked(admission, "kind", visitor, done, log))
                for visitor in (Visitor("c1", "2.16.7.1"), Visitor("here"))]  # a new address; this host's network
        await asyncio.sleep(0.01)
        assert admission.line("kind").waiting == 2
        done.set()
        await asyncio.gather(*first, *late)

    log = run(scenario)
    assert [entry for entry in log if entry[0] == "refused"] == [
        ("refused", "kind", "1 question of this kind is being answered and 2 more are waiting, so the app can take "
                            "no more of them now: try again in about 4 s")]
    assert [entry[2] for entry in log if entry[0] == "answered"] == ["a1", "b1", "c1"]


def test_a_networks_requests_without_a_session_are_counted_by_its_address_alone_and_wait_their_turn():
    admission = Admission(max_open=2)
    network = network_of("93.184.216.34")

    async def scenario(log):
        done = asyncio.Event()
        asking = [asyncio.create_task(asked(admission, f"kind{i}", network, done, log)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert admission.open == {("address", "93.184.216.34"): 2} and admission.held_back == {"93.184.216.34": 1}
        done.set()
        await asyncio.gather(*asking)

    log = run(scenario)
    assert [entry[0] for entry in log].count("answered") == 3  # the third waited for the first two: not refused


def test_a_visitor_starts_at_most_per_hour_questions_of_a_kind_an_hour(monkeypatch):
    from bert_demo.app.guards import admission as module

    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    admission = Admission({"download": Share(running=1, waiting=3, per_hour=2, noun="download from the hub")})

    async def scenario(log):
        done = asyncio.Event()
        done.set()
        for minute in (0, 10, 20, 61):
            now[0] = 1000.0 + 60 * minute
            await asked(admission, "download", Visitor(f"s{minute}", "93.184.216.34"), done, log)

    log = run(scenario)
    assert [entry[0] for entry in log] == ["answering", "answered", "answering", "answered", "refused",
                                           "answering", "answered"]
    assert log[4][2] == ("your network has started 2 downloads from the hub in the last hour, the most one network "
                         "may: try again in about 40 min")


def test_zipping_a_checkpoint_is_no_download_from_the_hub_and_takes_none_of_its_hourly_quota():
    """Zipping a checkpoint for the Model tab is slow work of the app's own, not a download from the hub: it waits in
    the slow line and takes nothing of an address's hub downloads an hour."""
    from bert_demo.app.guards.admission import DOWNLOAD, HUB, SLOW

    assert SHARES[DOWNLOAD] is HUB and DOWNLOAD != "download"
    assert SHARES["download"] is SLOW and SLOW.per_hour is None


def test_every_training_step_long_or_short_and_the_gradient_view_wait_in_the_one_line_of_training_steps():
    """One training step at a time, whichever way it is asked: a wiki step and one on 5,000 typed characters ran side
    by side (+1.15-1.31 GB, against +0.60-0.80 alone), and the forward pass's gradient view took a step in its own
    line (+534 MB)."""
    typed = "the mill stood by the river. " * 180  # 5,220 characters: a long question of any other kind
    assert kind_of("training_step", {"source": "your own paragraphs", "typed": typed}) == "training_step"
    assert kind_of("forward_steps", {"text_a": "the cat sat.", "shows": "gradient"}) == "training_step"
    assert kind_of("forward_steps", {"text_a": "the cat sat.", "shows": "values"}) == "forward_steps"
    assert kind_of("forward_steps", {"text_a": typed, "shows": "values"}) == "forward_steps, long"
    assert SHARES["training_step"].running == 1
