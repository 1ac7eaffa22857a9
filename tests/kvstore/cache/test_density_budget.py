"""Density budgets (`budget=0.2`): never below what the policy must keep, so a short prompt is held whole instead of
refused; fixed by the first prompt in a local session, following the conversation with `density_grows` (serve's
sessions); a session saved before `density_grows` existed loads as it was."""

from __future__ import annotations

import pytest
from sessionlib import qwen_tokenizer, tiny_chat_model, words
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore import POLICIES
from kvstore.cache.config import CacheConfig
from kvstore.defaults import DEFAULT_POLICY
from kvstore.session.session import Session, SessionConfig

EVICTING = [name for name, (cls, _) in POLICIES.items() if cls.evicts]


@pytest.mark.parametrize("policy", EVICTING)
def test_a_prompt_shorter_than_the_forced_set_is_held_whole(policy: str) -> None:
    model = tiny_model()
    cache = kvstore.make_cache(model, policy, budget=0.2)
    kvstore.prefill(model, cache, random_ids(20))  # 0.2 x 20 = 4 tokens: fewer than most policies must keep
    assert cache.budget_tokens == max(cache.least_budget(), 4)
    if cache.budget_tokens >= 20:  # the default memory (and most): the prompt is held whole
        assert cache.stats()["tokens_evicted"] == 0
        assert cache.stats()["tokens_held_per_layer"] == [20, 20]
    assert policy != DEFAULT_POLICY or cache.budget_tokens >= 20
    long = kvstore.make_cache(model, policy, budget=0.2)  # a long prompt: d x tokens, as before
    kvstore.prefill(model, long, random_ids(2000))
    assert long.budget_tokens == round(0.2 * 2000) > long.least_budget()


def session(**cache_options) -> Session:
    config = SessionConfig(policy="nexus-agent", budget=0.2, cache_options=cache_options)
    return Session(tiny_chat_model(), qwen_tokenizer(), config)


def grow(s: Session, turns: int) -> list[tuple[int, int | None]]:
    """(tokens seen, budget) after each turn's prefill of a chat whose turns are longer than its opening."""
    s.append([{"role": "system", "content": words(40, "sys")}, {"role": "user", "content": words(40, "task")}])
    s.prefill()
    out = [(s.cache.get_seq_length(), s.cache.budget_tokens)]
    for t in range(turns):
        s.append([{"role": "assistant", "content": words(60, f"r{t}")}, {"role": "user", "content": words(300, "o")}])
        s.prefill()
        out.append((s.cache.get_seq_length(), s.cache.budget_tokens))
    return out


def test_a_local_session_fixes_the_density_at_its_first_prompt_and_a_served_one_follows_it() -> None:
    fixed = grow(session(), 3)
    assert len({budget for _, budget in fixed}) == 1  # docs/memory.md: fixed at the first prefill
    grows = session(density_grows=True)
    following = grow(grows, 3)
    assert [b for _, b in following] == [max(round(0.2 * seen), grows.cache.least_budget()) for seen, _ in following]
    assert following[-1][1] > following[0][1]
    assert following[-1][1] > following[1][1]
    held = grows.cache.stats()["tokens_held_per_layer"]
    assert all(h <= following[-1][1] for h in held)


def test_a_session_saved_before_density_grows_existed_loads_as_fixed(tmp_path) -> None:
    s = session()
    grow(s, 1)
    options = s.cache.config.to_dict()
    del options["density_grows"]
    assert CacheConfig.from_saved(options).density_grows is False
    s.save(tmp_path / "s.session")
    back = Session.load(tmp_path / "s.session", tiny_chat_model(), qwen_tokenizer())
    assert back.cache.budget_tokens == s.cache.budget_tokens
    assert not back.cache.config.density_grows
