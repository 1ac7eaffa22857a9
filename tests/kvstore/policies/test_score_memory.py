"""The Nexus score remembered over eviction steps (`score_memory`, this project's option), on the Nexus score of
the current window with top-K and half of the budget recent (the configuration of the first default memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sessionlib import qwen_tokenizer, tiny_chat_model, words

import kvstore
from kvstore.errors import KVStoreError
from kvstore.session.session import Session, SessionConfig

WINDOW = {"selector": "topk", "recent_share": 0.5}  # `nexus` as the first default memory ran it


def _prefilled(tokens: int = 700, chunk: int = 100, **options):
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, "nexus", budget=192, block=16, **(WINDOW | options))
    ids = torch.randint(0, 1000, (1, tokens), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids, chunk_size=chunk)
    return model, cache


@pytest.mark.parametrize("memory", ["mean", "max"])
def test_the_first_step_scores_like_the_paper_and_later_steps_remember(memory: str) -> None:
    _, plain = _prefilled(tokens=300, chunk=300)  # one eviction step: nothing to remember yet
    _, remembering = _prefilled(tokens=300, chunk=300, score_memory=memory)
    for a, b in zip(plain.layers, remembering.layers, strict=True):
        assert torch.equal(a.positions, b.positions)
    _, remembering = _prefilled(score_memory=memory)
    layer = remembering.layers[1]
    steps = layer.state["nexus_steps"][0, 0]
    assert steps.max() >= 2
    assert bool((steps[-20:] == 1).all())  # old tokens scored in several steps, the newest once
    assert torch.equal(layer.state["nexus_score"][0, 0], layer.state["nexus_score"][0, 1])  # one score per layer


def test_a_dry_run_plan_leaves_the_remembered_scores_alone() -> None:
    _, cache = _prefilled(score_memory="mean")
    layer = cache.layers[0]
    before = {k: v.clone() for k, v in layer.state.items()}
    layer.plan(128)  # a benchmark dry run
    assert all(torch.equal(before[k], layer.state[k]) for k in before)


def test_remembering_changes_what_is_kept_and_the_budget_still_holds() -> None:
    _, plain = _prefilled()
    _, remembering = _prefilled(score_memory="max")
    assert any(not torch.equal(a.positions, b.positions) for a, b in zip(plain.layers, remembering.layers, strict=True))
    assert all(layer.held() <= 192 for layer in remembering.layers)


def test_remembered_scores_survive_save_and_load(tmp_path: Path) -> None:
    config = SessionConfig(policy="nexus-agent", budget=128, cache_options={"block": 16, "score_memory": "mean"})
    s = Session(tiny_chat_model(), qwen_tokenizer(), config)
    s.append([{"role": "system", "content": words(80, "sys")}, {"role": "user", "content": words(120)}])
    s.generate(8)
    s.save(tmp_path / "s.session")
    restored = Session.load(tmp_path / "s.session", tiny_chat_model(), qwen_tokenizer())
    for a, b in zip(s.cache.layers, restored.cache.layers, strict=True):
        assert torch.equal(a.state["nexus_steps"], b.state["nexus_steps"])
    for t in range(2):
        for session in (s, restored):
            session.append([{"role": "tool", "content": words(60, f"obs{t}-")}])
        assert s.generate(8).token_ids == restored.generate(8).token_ids


def test_an_unknown_score_memory_is_refused() -> None:
    with pytest.raises(KVStoreError, match="score_memory"):
        kvstore.CacheConfig.from_options("nexus", score_memory="ema")
