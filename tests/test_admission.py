"""bert_demo/app/admission.py: each kind of question waits in its own line, a full line refuses at once with when to
try again, and one visitor cannot hold more than their share of open questions."""
from __future__ import annotations

import asyncio

import pytest

from bert_demo.app.admission import Admission, Refused, Share


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
    assert "2 questions of this kind are being answered and 1 more are waiting" in refusal
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
