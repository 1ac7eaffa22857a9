"""Protected spans: the opening (system prompt + task) survives every eviction, counts in the budget, and a budget
that cannot hold it fails with one clear message. Tiny random Qwen3, real Qwen3 tokenizer and template."""

from __future__ import annotations

import pytest
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore.errors import KVStoreError
from kvstore.session.session import Session, SessionConfig

BLOCK = 16
BUDGET = 480  # holds the ~230-token opening beside H2O's recent half of the budget


def session(**config) -> Session:
    config = {"policy": "nexus", "budget": BUDGET, "cache_options": {"block": BLOCK}} | config
    return Session(tiny_chat_model("qwen3", 4096), qwen_tokenizer(), SessionConfig(**config))


def agent_turns(s: Session, turns: int = 6) -> None:
    s.append([{"role": "system", "content": words(100, "sys")}, {"role": "user", "content": words(60, "task")}])
    s.prefill()
    for t in range(turns):
        s.append([{"role": "assistant", "content": words(30, f"r{t}")}, {"role": "user", "content": words(80, "o")}])
        s.prefill()


def held_positions(s: Session) -> list[set[int]]:
    return [set(layer.positions[0, 0].tolist()) for layer in s.cache.layers]


@pytest.mark.parametrize("policy", ["nexus", "streaming", "snapkv", "h2o"])
def test_the_protected_opening_survives_every_eviction(policy: str) -> None:
    s = session(policy=policy, protect="system+task")
    agent_turns(s)
    ((start, end),) = s.cache.signals.protected
    assert start == 0
    assert end > 100  # the system prompt and the task, rendered
    assert s.cache.stats()["tokens_evicted"] > 0  # eviction did happen
    for held in held_positions(s):
        assert set(range(start, end)) <= held
        assert len(held) <= BUDGET + BLOCK  # counted in the budget: the layer still holds budget + one block at most


def test_without_protection_the_opening_is_evicted() -> None:
    s = session(protect="none")
    agent_turns(s)
    assert s.cache.signals.protected == []
    opening = len(s.renderer.encode_messages(s.messages[:2], first=True))
    assert any(not set(range(opening)) <= held for held in held_positions(s))


def test_system_only_protects_the_system_prompt() -> None:
    s = session(protect="system")
    agent_turns(s, turns=1)
    ((start, end),) = s.cache.signals.protected
    assert (start, end) == (0, len(s.renderer.encode_messages(s.messages[:1], first=True)))


def test_a_budget_that_cannot_hold_the_opening_is_refused_with_a_clear_message() -> None:
    s = session(budget=96, protect="system+task")
    with pytest.raises(KVStoreError, match=r"cannot hold the protected opening.*protect less \(protect 'system' or"):
        s.append([{"role": "system", "content": words(100, "sys")}, {"role": "user", "content": words(60, "t")}])
    assert s.tokens == []
    assert s.cache.signals.protected == []  # nothing half-appended


def test_a_density_budget_never_goes_below_the_protected_opening() -> None:
    s = session(budget=0.5, protect="system+task")  # half the opening: less than the ~230 tokens it protects
    agent_turns(s, turns=2)
    ((start, end),) = s.cache.signals.protected
    assert s.cache.budget_tokens == s.cache.least_budget() > round(0.5 * end)  # fixed by the first prompt
    assert s.cache.stats()["tokens_evicted"] > 0
    assert all(set(range(start, end)) <= held for held in held_positions(s))


def test_re_prefill_and_save_load_keep_the_protection(tmp_path) -> None:
    s = session(protocol="re-prefill", protect="system+task")
    agent_turns(s, turns=3)
    spans = list(s.cache.signals.protected)
    assert spans and all(set(range(*spans[0])) <= held for held in held_positions(s))
    s.save(tmp_path / "s.session")
    back = Session.load(tmp_path / "s.session", tiny_chat_model("qwen3", 4096), qwen_tokenizer())
    assert back.cache.signals.protected == spans


def test_unknown_protect_value_is_refused() -> None:
    with pytest.raises(KVStoreError, match="protect 'everything': use one of system\\+task, system, none"):
        SessionConfig(protect="everything")
