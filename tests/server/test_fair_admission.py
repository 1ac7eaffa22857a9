"""Fair admission (server.admission): more clients than `max_sessions`, in multi-turn conversations, never stall the
server: every turn is answered and tokens are generated in every second of the run."""

from __future__ import annotations

import threading
import time

import openai
import pytest
from sessionlib import words


def converse(url: str, tag: str, turns: int, stamps: list[float], errors: list[str]) -> list[str]:
    """One streaming client: `turns` turns of one conversation; the arrival time of every token into `stamps`."""
    c = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
    messages, ids = [{"role": "user", "content": words(60, tag)}], []
    for turn in range(turns):
        try:
            stream = c.chat.completions.create(
                model="tiny-qwen3", messages=messages, max_tokens=12, temperature=0, stream=True
            )
            text = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    stamps.append(time.monotonic())
                    text.append(chunk.choices[0].delta.content)
                if nexus := (chunk.model_extra or {}).get("nexus"):
                    ids.append(nexus["session_id"])
        except openai.APIError as exc:
            errors.append(f"{tag} turn {turn}: {exc}")
            return ids
        messages += [{"role": "assistant", "content": "".join(text)}, {"role": "user", "content": f"{tag} {turn}"}]
    return ids


def run_clients(url: str, clients: int, turns: int) -> tuple[list[float], list[str], dict[str, list[str]], float]:
    stamps: list[float] = []
    errors: list[str] = []
    ids: dict[str, list[str]] = {}

    def one(tag: str) -> None:
        ids[tag] = converse(url, tag, turns, stamps, errors)

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(f"c{i}",)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    return sorted(stamps), errors, ids, t0


def idle_seconds(stamps: list[float], t0: float) -> list[int]:
    """The whole seconds of the run, counted from `t0` to the last token, in which no token arrived."""
    seen = {int(s - t0) for s in stamps}
    return [s for s in range(int(stamps[-1] - t0) + 1) if s not in seen] if stamps else [0]


@pytest.mark.parametrize(("clients", "sessions", "batch", "turns"), [(4, 2, 2, 6), (16, 8, 16, 4)])
def test_more_clients_than_sessions_for_many_turns_generate_every_second(
    make_server, clients: int, sessions: int, batch: int, turns: int
) -> None:
    """More clients than resident sessions (issue 61's two cases: 4 on `--max-sessions 2 --max-batch 2`, 16 on 8),
    several turns each: before fair admission a newcomer at the head of the queue waited for a resident slot held
    by sessions whose turns queued behind it (a deadlock until the queue timeout) or was refused with 429."""
    server = make_server(max_sessions=sessions, max_batch=batch, queue_timeout_s=20)
    stamps, errors, ids, t0 = run_clients(server.url, clients=clients, turns=turns)
    assert not errors, errors
    assert all(len(v) == turns and len(set(v)) == 1 for v in ids.values()), ids  # each client kept its session
    assert idle_seconds(stamps, t0) == [], (idle_seconds(stamps, t0), stamps[-1] - t0)
    assert server.metrics.requests == {200: clients * turns}
    assert server.metrics.counters.get("sessions_parked_total", 0) > 0  # the slots were shared by parking
