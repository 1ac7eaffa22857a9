"""Many clients at once: decode steps are batched, and every conversation gets the replies it gets served alone."""

from __future__ import annotations

import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
from sessionlib import words

SIZES = (60, 150, 240, 330, 420)  # conversations of different lengths: ragged caches in every batch


def conversation(url: str, size: int) -> list[str]:
    c = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    messages, replies = [{"role": "user", "content": words(size, f"c{size}")}], []
    for turn in range(2):
        r = c.chat.completions.create(model="tiny-qwen3", messages=messages, max_tokens=30, temperature=0)
        replies.append(r.choices[0].message.content)
        messages += [{"role": "assistant", "content": replies[-1]}, {"role": "user", "content": f"turn {turn}"}]
    return replies


def counters(server) -> dict[str, float]:
    text = urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics").read().decode()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if not line.startswith("#")}


def test_concurrent_sessions_are_batched_and_exact(make_server) -> None:
    batched, serial = make_server(max_batch=8), make_server(max_batch=1)
    with ThreadPoolExecutor(len(SIZES)) as pool:
        together = list(pool.map(lambda n: conversation(batched.url, n), SIZES))
    alone = [conversation(serial.url, n) for n in SIZES]
    assert together == alone
    m = counters(batched)
    assert m["nexus_decode_rows_total"] > 1.5 * m["nexus_decode_steps_total"]  # most steps decoded several sessions
    assert m['nexus_sessions{state="idle"}'] == len(SIZES) and m["nexus_turns_total"] == 2 * len(SIZES)
    s = counters(serial)
    assert s["nexus_decode_rows_total"] == s["nexus_decode_steps_total"]  # max_batch 1: one session per step
