"""Scheduler.call: other work on the model (a served calibration) runs on the scheduler thread; a generator runs one
step per scheduler loop, so the sessions go on decoding between its steps, and KV room it sets aside stays set aside
until it ends."""

from __future__ import annotations

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
