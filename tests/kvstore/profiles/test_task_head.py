"""The task's head (kvstore.policies.nexus_agent, `task_head` / `task_weight`): where a memory profile matched the
opening, the first tokens of the task's own text are kept, on the tiny random Qwen3 with the real tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from profilelib import conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore import Session, SessionConfig
from kvstore.profiles.profile import MemoryProfile


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory) -> Path:
    return save_tiny_profile(tmp_path_factory.mktemp("profile") / "profile.pt")


def _session(profile: str | None, **options) -> Session:
    config = SessionConfig(budget=256, profile=profile, cache_options={"chunk_size": 128, "selector": "topk"} | options)
    return Session(tiny_chat_model(), qwen_tokenizer(), config)


def _opened(profile: str | None, **options) -> Session:
    s = _session(profile, **options)
    s.append(conversation(words(700, "delta"), replies=1)[:2])  # a task far larger than the budget
    s.prefill()
    return s


def _head_kept(s: Session, start: int, n: int = 32) -> list[bool]:
    """Per layer and kv head: are all of the task's first n tokens held?"""
    head = torch.arange(start, start + n)
    return [bool(torch.isin(head, pos).all()) for layer in s.cache.layers for pos in layer.positions[0]]


def test_the_task_span_lies_between_the_matched_prefix_and_suffix(profile_file: Path) -> None:
    s = _opened(str(profile_file))
    p = MemoryProfile.load(profile_file)
    assert s.profile_status.startswith("matched")
    prior = s.cache.signals.prior[0, 0]  # over the opening (a reply's generation prompt is not part of it)
    start, end = s.cache.signals.task_span
    assert start == len(p.prefix)
    # the suffix's first tokens may not match (the task's last word joins them differently): those count as task
    assert len(prior) - len(p.suffix) <= end < len(prior)
    assert bool((prior[start:end] == 0).all()) and bool((prior[end:] > 0).all())


def test_the_task_head_is_kept_where_the_profile_matched(profile_file: Path) -> None:
    start = len(MemoryProfile.load(profile_file).prefix)
    kept = _head_kept(_opened(str(profile_file)), start)
    assert all(kept)
    without = _head_kept(_opened(str(profile_file), task_head=0), start)
    assert not all(without)  # ranked by what the text after it attends, parts of it go


def test_no_matched_profile_no_task_head(profile_file: Path) -> None:
    other = [{"role": "system", "content": "another agent"}, {"role": "user", "content": words(300, "q")}]
    for profile in (str(profile_file), None):  # a token prior, or nothing
        s = _session(profile)
        s.append(other)
        s.prefill()
        assert s.cache.signals.task_span is None
        ctx = s.cache.layers[0].score_context()
        assert s.cache.policy._task_bonus(ctx, torch.float32) == 0.0


def test_a_saved_session_keeps_its_task_head(profile_file: Path, tmp_path: Path) -> None:
    s = _opened(str(profile_file))
    s.save(tmp_path / "s.pt")
    back = Session.load(tmp_path / "s.pt", tiny_chat_model(), qwen_tokenizer())
    assert back.cache.signals.task_span == s.cache.signals.task_span
    assert back.cache.config == s.cache.config


def _replied(profile: str, **options) -> Session:
    """A task about as large as the budget, one reply, then tool outputs that would push it out."""
    s = _session(profile, **options)
    s.append(conversation(words(200, "delta"), replies=1)[:2])
    s.prefill()
    s.teacher_force([{"role": "assistant", "content": "look " + words(30, "a")}])
    for i in range(3):
        s.append([{"role": "user", "content": words(120, f"o{i}")}])
        s.prefill()
    return s


def test_the_task_text_gets_its_bonus_once_a_reply_has_been_seen(profile_file: Path) -> None:
    """`task_text_weight` (1 in the default memory): every held token of the matched task's text gets it, but only
    in a row that has seen a reply query; the opening's own eviction ranks without it."""
    s = _opened(str(profile_file))
    assert s.cache.config.settings.task_text_weight == 1.0
    off = _session(str(profile_file), task_text_weight=0.0).cache.policy
    ctx = s.cache.layers[1].score_context()
    torch.testing.assert_close(s.cache.policy._task_bonus(ctx, torch.float32), off._task_bonus(ctx, torch.float32))
    s = _replied(str(profile_file))
    start, end = s.cache.signals.task_span
    ctx = s.cache.layers[1].score_context()
    extra = s.cache.policy._task_bonus(ctx, torch.float32) - off._task_bonus(ctx, torch.float32)
    inside = (ctx.positions >= start) & (ctx.positions < end)
    assert bool(inside.any())
    torch.testing.assert_close(extra, inside.float())

    def task_tokens(session: Session) -> int:
        return sum(int(((p >= start) & (p < end)).sum()) for p in (layer.positions for layer in session.cache.layers))

    assert task_tokens(s) > task_tokens(_replied(str(profile_file), task_text_weight=0.0))
