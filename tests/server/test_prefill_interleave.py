"""A newcomer's prefill runs chunk by chunk between the decode steps of the active sessions, with the same tokens.

The scheduler of a real (not listening) server is stepped by hand, one loop at a time, so the order of prefill
chunks and decode steps is observed exactly: with interleaving, session A decodes one token between every two
chunks of B's long prefill; with the whole prefill at admission, A waits for all of it. Greedy tokens of both
sessions are the same either way, and B's equal B alone (kvstore's Session.generate), eviction included.
"""

from __future__ import annotations

import pytest
import torch
from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model, words

from kvstore.defaults import DEFAULT_POLICY
from kvstore.session.render import ChatRenderer
from kvstore.session.session import Session, SessionConfig
from server import api
from server.app import Server

CHUNK = 64


def opening(n: int, tag: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": words(n, tag)}]


def run_pair(interleave: bool, tmp_path) -> dict:
    """A decoding, then B (a long prompt) arrives; the scheduler is stepped until both are done."""
    torch.set_num_threads(1)
    config = serve_config(port=0, model="tiny-qwen3", budget=96, chunk_size=CHUNK, interleave_prefill=interleave,
                          park_dir=tmp_path / f"park-{interleave}")  # fmt: skip
    server = Server(tiny_chat_model(), qwen_tokenizer(), config)
    sched = server.scheduler

    def submit(messages, max_tokens):
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        return server.submit(api.parse_request(body, None, config))

    try:
        a = submit(opening(40, "a"), 120)
        while a.reply is None or a.reply.next_input is None:
            sched.loop_once()
        a_before = len(a.reply.stream.ids)
        b = submit(opening(900, "b"), 20)
        timeline = []  # per loop while B prefills: (B's prefill tokens left, tokens A has generated)
        while b.reply is None or not b.reply.prefill_done:
            sched.loop_once()
            timeline.append((b.reply.prefill_left if b.reply else None, len(a.reply.stream.ids)))
        while sched.active:
            sched.loop_once()
        results = {name: _result(job) for name, job in (("a", a), ("b", b))}
        return {"timeline": timeline, "a_before": a_before, "b_prefill": b.reply.prefill_tokens, **results}
    finally:
        server.close()


def _result(job) -> dict:
    events = []
    while not job.events.empty():
        events.append(job.events.get())
    kind, value = events[-1]
    assert kind == "done", value
    session = job.entry.session
    return {"tokens": list(session.tokens), "positions": [layer.positions.tolist() for layer in session.cache.layers],
            "text": value["text"], "nexus": value["nexus"]}  # fmt: skip


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[bool, dict]:
    tmp = tmp_path_factory.mktemp("interleave")
    return {flag: run_pair(flag, tmp) for flag in (True, False)}


def test_decode_steps_run_between_the_chunks_of_a_long_prefill(both) -> None:
    inter = both[True]
    prompt = len(ChatRenderer(qwen_tokenizer()).generation_prompt_ids)  # runs with the message's last chunk
    chunks = -(-(inter["b_prefill"] - prompt) // CHUNK)
    assert chunks >= 10  # a long newcomer: many chunks
    left = [t for t, _ in inter["timeline"]]
    generated = [n for _, n in inter["timeline"]]
    assert len(left) == chunks and left[-1] == 0
    assert all(x - y == CHUNK for x, y in zip(left[:-2], left[1:-1], strict=True))  # one chunk per loop
    assert 0 < left[-2] - prompt <= CHUNK  # the last loop: the message's last chunk, then the prompt
    assert generated == list(range(inter["a_before"] + 1, inter["a_before"] + 1 + chunks))  # A: a token per chunk

    whole = both[False]
    assert whole["timeline"] == [(0, whole["a_before"] + 1)]  # all of B's prefill in one loop, one A step after it


def test_interleaving_changes_no_token_and_no_eviction(both) -> None:
    inter, whole = both[True], both[False]
    for name in ("a", "b"):
        assert inter[name]["tokens"] == whole[name]["tokens"]
        assert inter[name]["positions"] == whole[name]["positions"]  # the same tokens survived eviction
    assert inter["b"]["nexus"]["turn"]["evicted_tokens"] > 0
    alone = Session(
        tiny_chat_model(),
        qwen_tokenizer(),
        SessionConfig(model="tiny-qwen3", policy=DEFAULT_POLICY, budget=96, chunk_size=CHUNK),
    )
    alone.append(opening(900, "b"))
    reply = alone.generate(20, temperature=0.0)
    assert inter["b"]["tokens"] == alone.tokens and inter["b"]["text"] == reply.text
    assert inter["b"]["positions"] == [layer.positions.tolist() for layer in alone.cache.layers]
    assert len(set(inter["a"]["tokens"][-100:])) > 10  # A wrote a real reply, not one repeated token
