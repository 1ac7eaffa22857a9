"""Scheduler.call: other work on the model (a served calibration) runs on the scheduler thread; a generator runs one
step per scheduler loop, so the sessions go on decoding between its steps, and KV room it sets aside stays set aside
until it ends."""

from __future__ import annotations

import itertools
import threading
import time

import openai
import pytest
from sessionlib import words


def _reply_in_background(server, max_tokens: int) -> threading.Thread:
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": words(60, "x")}]
    thread = threading.Thread(target=lambda: client.chat.completions.create(
        model="tiny-qwen3", messages=messages, max_tokens=max_tokens, temperature=0))  # fmt: skip
    thread.start()
    end = time.monotonic() + 60
    while server.metrics.counters["decode_steps_total"] == 0 and time.monotonic() < end:
        time.sleep(0.01)
    return thread


def test_a_generator_call_runs_between_the_decode_steps(make_server) -> None:
    server = make_server(memory_cap=64 * 2**20)
    scheduler, counters = server.scheduler, server.metrics.counters
    reply = _reply_in_background(server, max_tokens=200)
    seen, reserved = [], []

    def work(model, tokenizer):
        scheduler.room_for_full_cache(1000, "this test")
        for _ in range(20):
            seen.append(counters["decode_steps_total"])
            reserved.append(scheduler.calls.reserved)
            yield
        return "done"

    assert scheduler.call(work) == "done"
    reply.join(timeout=120)
    assert seen[-1] > seen[0]  # the reply decoded between the call's steps
    assert set(reserved) == {1000 * scheduler.per_token}  # set aside for the whole call
    assert scheduler.calls.reserved == 0 and not scheduler.calls.busy  # and given back at its end


def test_a_call_returns_its_value_or_raises_its_error_and_the_server_goes_on(make_server) -> None:
    server = make_server()
    scheduler = server.scheduler

    def failing(model, tokenizer):
        yield
        raise ValueError("broken step")

    assert scheduler.call(lambda model, tokenizer: model is scheduler.model) is True  # a plain function
    with pytest.raises(ValueError, match="broken step"):
        scheduler.call(failing)
    with pytest.raises(ZeroDivisionError):
        scheduler.call(lambda model, tokenizer: 1 / 0)
    assert not scheduler.calls.busy
    reply = _reply_in_background(server, max_tokens=4)
    reply.join(timeout=120)
    assert not reply.is_alive()


def _timed_steps(scheduler, counters, steps: int, seconds: float):
    """A call of `steps` steps that each take `seconds`; (start time, decode steps so far) at each step."""
    marks = []

    def work(model, tokenizer):
        for _ in range(steps):
            marks.append((time.monotonic(), counters["decode_steps_total"]))
            time.sleep(seconds)
            yield
        return marks

    return scheduler.call(work)


def test_a_call_takes_at_most_its_share_of_the_time_while_a_reply_decodes(make_server) -> None:
    """A calibration step takes many decode steps' time: while a turn decodes, the call's steps are spaced so that
    they take at most CALL_SHARE of the scheduler's time, and the turn decodes in between."""
    from server.calls import CALL_SHARE

    server = make_server()
    reply = _reply_in_background(server, max_tokens=2000)
    marks = _timed_steps(server.scheduler, server.metrics.counters, steps=5, seconds=0.1)
    decoding = reply.is_alive()
    reply.join(timeout=300)
    assert decoding  # the reply outlasted the call: every step ran against it
    pairs = list(itertools.pairwise(marks))
    assert min(b[0] - a[0] for a, b in pairs) >= 0.1 / CALL_SHARE * 0.95, marks  # a step, then its rest
    assert all(b[1] - a[1] >= 3 for a, b in pairs), marks  # decode steps ran in each rest


def test_with_no_turn_running_a_call_runs_at_full_speed(make_server) -> None:
    server = make_server()
    marks = _timed_steps(server.scheduler, server.metrics.counters, steps=5, seconds=0.1)
    assert marks[-1][0] - marks[0][0] < 4 * 0.1 / 0.25 * 0.6  # no rest between the steps (0.4 s, not 1.6 s)
