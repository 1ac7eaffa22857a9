"""The persistent session on a tiny random Qwen3 model with the real Qwen3 tokenizer and template."""

from __future__ import annotations

import pytest
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore.errors import KVStoreError
from kvstore.session.session import Reply, Session, SessionConfig, TurnStats

BLOCK = 16
EVICTING = {"policy": "nexus", "budget": 96, "cache_options": {"block": BLOCK}}


def session(max_positions: int = 4096, **config) -> Session:
    return Session(tiny_chat_model("qwen3", max_positions), qwen_tokenizer(), SessionConfig(**config))


def forced_turns(s: Session, turns: int = 4) -> list[TurnStats]:
    """An agent session with forced replies: observation, prefill (the turn), then the reply as given text."""
    s.append([{"role": "system", "content": words(120, "sys")}, {"role": "user", "content": words(60, "task")}])
    stats = []
    for t in range(turns):
        stats.append(s.prefill())
        reply, observation = words(20, f"r{t}"), words(50, f"o{t}")
        s.append([{"role": "assistant", "content": reply}, {"role": "tool", "content": observation}])
    return stats


@pytest.mark.parametrize("protocol", ["true-eviction", "re-prefill"])
def test_protocols_prefill_what_they_promise_on_the_same_tokens(protocol: str) -> None:
    reference = session(**EVICTING)
    forced_turns(reference)
    s = session(protocol=protocol, **EVICTING)
    stats = forced_turns(s)
    assert s.tokens == reference.tokens  # both protocols see exactly the same token sequence
    history = [t.history_tokens for t in stats]
    if protocol == "true-eviction":
        new_tokens = [history[0]] + [b - a for a, b in zip(history, history[1:], strict=False)]
        assert [t.prefill_tokens for t in stats] == new_tokens
    else:
        assert [t.prefill_tokens for t in stats] == history  # the whole history, each turn
    assert s.cache.get_seq_length() == s.prefilled == history[-1]
    assert all(t.held_tokens <= 96 + BLOCK for t in stats)
    assert stats[-1].evicted_tokens > 0


def test_true_eviction_holds_the_budget_while_full_holds_everything() -> None:
    nexus, full = session(**EVICTING), session(policy="full")
    last_nexus, last_full = forced_turns(nexus)[-1], forced_turns(full)[-1]
    assert last_full.held_tokens == last_full.history_tokens
    assert last_full.evicted_tokens == 0
    assert last_nexus.held_tokens <= 96 + BLOCK
    assert last_nexus.held_bytes < last_full.held_bytes / 2


def test_full_policy_protocols_generate_identical_replies() -> None:
    replies = {}
    for protocol in ("true-eviction", "re-prefill"):
        s = session(policy="full", protocol=protocol)
        s.append([{"role": "user", "content": words(80)}])
        replies[protocol] = []
        for t in range(3):
            replies[protocol].append(s.generate(8).token_ids)
            s.append([{"role": "tool", "content": words(30, f"o{t}")}])
    assert replies["true-eviction"] == replies["re-prefill"]


def test_reply_tokens_stay_raw_and_the_turn_is_closed() -> None:
    s = session(**EVICTING)
    s.append([{"role": "user", "content": words(40)}])
    start = s.num_tokens
    reply = s.generate(6)
    assert isinstance(reply, Reply)
    assert reply.finish_reason == "length"
    assert len(reply.token_ids) == 6
    prompt, closing = s.renderer.generation_prompt_ids, s.renderer.end_of_turn_ids
    assert s.tokens[start:] == prompt + reply.token_ids + closing
    assert s.messages[-1] == {"role": "assistant", "content": reply.text}
    assert reply.stats.generated_tokens == 6
    assert reply.stats.prefill_tokens == start + len(prompt)
    assert s.prefilled == s.num_tokens - len(closing) - 1  # the last reply token and the closing wait for the next turn


def test_stop_strings_and_eos_end_the_reply() -> None:
    s = session(**EVICTING)
    s.append([{"role": "user", "content": words(40)}])
    probe = s.generate(8).token_ids
    stop = s.renderer.decode(probe[:4])[-3:]  # text the greedy reply reaches at its 4th token
    k = next(i for i in range(1, len(probe)) if probe[i] not in probe[:i])  # its first new token after the first
    for finish, kwargs in (("stop", {"stop": [stop]}), ("eos", {})):
        s = session(**EVICTING)
        s.append([{"role": "user", "content": words(40)}])
        if finish == "eos":
            s.eos_ids = {probe[k]}  # a token of the greedy reply plays the end-of-turn token
        reply = s.generate(8, **kwargs)
        assert reply.finish_reason == finish
        if finish == "stop":
            assert reply.token_ids == probe[: len(reply.token_ids)]
            assert stop in reply.text
            assert len(reply.token_ids) <= 4
        else:
            assert reply.token_ids == probe[: k + 1]
            assert reply.text == s.renderer.decode(probe[:k])


def test_streamed_text_is_the_reply_text() -> None:
    s = session(**EVICTING)
    s.append([{"role": "user", "content": words(40)}])
    pieces: list[str] = []
    reply = s.generate(12, temperature=1.0, on_token=pieces.append)
    assert "".join(pieces) == reply.text
    assert pieces


def test_seeded_sampling_is_reproducible() -> None:
    def sample(seed: int) -> list[list[int]]:
        s = session(seed=seed, **EVICTING)
        s.append([{"role": "user", "content": words(60)}])
        return [s.generate(8, temperature=0.8).token_ids for _ in range(2)]

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_context_limit_counts_positions_not_held_tokens() -> None:
    s = session(max_positions=256, **EVICTING)
    s.append([{"role": "user", "content": words(150)}])
    before = list(s.tokens)
    with pytest.raises(KVStoreError, match="maximum of 256 positions"):
        s.append([{"role": "tool", "content": words(200)}])
    assert s.tokens == before  # a refused append changes nothing
    reply = s.generate(1000)  # capped at the room left, although the cache holds far fewer tokens
    assert reply.finish_reason == "length"
    assert s.num_tokens == 256
    with pytest.raises(KVStoreError, match="no room left"):
        s.generate(10)


def test_turn_stats_as_data_and_one_line() -> None:
    s = session(**EVICTING)
    s.append([{"role": "user", "content": words(100)}])
    stats = s.generate(4).stats
    assert s.turns == [stats]
    assert stats.turn == 1
    data = stats.to_dict()
    assert {"prefill_tokens", "generated_tokens", "evicted_tokens", "held_tokens", "held_bytes"} <= set(data)
    assert {"prefill_s", "decode_s", "evict_s", "tokens_per_s"} <= set(data)
    assert stats.prefill_s > 0
    assert stats.decode_s > 0
    assert stats.tokens_per_s > 0
    assert 0 <= stats.evict_s
    assert "\n" not in stats.summary()
    assert "turn 1" in stats.summary()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"protocol": "sometimes"}, "protocol 'sometimes' is unknown"),
        ({"policy": "nope"}, "unknown policy"),
        ({"chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_config_is_one_clear_error(config: dict, message: str) -> None:
    with pytest.raises(KVStoreError, match=message):
        session(**config)


def test_bad_generation_arguments() -> None:
    s = session(**EVICTING)
    s.append([{"role": "user", "content": "hi"}])
    for kwargs in ({"temperature": -1.0}, {"top_p": 0.0}, {"max_new_tokens": 0}):
        with pytest.raises(KVStoreError):
            s.generate(**kwargs)
    assert s.num_tokens == len(s.renderer.encode_messages([{"role": "user", "content": "hi"}], first=True))


def test_an_interrupted_reply_leaves_a_usable_session() -> None:
    s = session(**EVICTING)
    s.append([{"role": "user", "content": words(100)}])

    seen: list[str] = []

    def interrupt(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        s.generate(20, on_token=interrupt)
    assert s.tokens[-len(s.renderer.end_of_turn_ids) :] == s.renderer.end_of_turn_ids  # the turn was closed
    assert s.messages[-1]["role"] == "assistant"
    assert s.prefilled == 0  # the cache starts over from the history
    s.append([{"role": "user", "content": "again"}])
    reply = s.generate(4)
    assert reply.stats.prefill_tokens == reply.stats.history_tokens - 4  # the whole history, once
    assert s.cache.get_seq_length() == s.prefilled


def test_prefill_steps_yield_between_chunks_and_leave_what_prefill_leaves() -> None:
    import torch

    options = EVICTING | {"chunk_size": 64}
    whole, stepped = session(**options), session(**options)
    opening = [{"role": "system", "content": words(120, "sys")}, {"role": "user", "content": words(60, "task")}]
    for s in (whole, stepped):
        s.append(opening)
    whole.prefill()
    steps = stepped.prefill_steps()
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            stats = done.value
            break
        pauses += 1
        assert stepped.prefilled == 0  # mid-prefill: the history's mark moves once it is over
    assert pauses == -(-len(stepped.tokens) // 64) - 1  # one pause between each two chunks
    assert stats.prefill_tokens == len(stepped.tokens)
    assert stepped.turns[-1] is stats
    for a, b in zip(whole.cache.layers, stepped.cache.layers, strict=True):
        assert torch.equal(a.positions, b.positions)
        assert torch.equal(a.keys, b.keys)
    assert torch.equal(whole.logits, stepped.logits)

    # left unfinished (a server's calibration cut short), the cache starts over from the history
    left = session(**options)
    left.append(opening)
    steps = left.prefill_steps()
    next(steps)
    steps.close()
    assert left.prefilled == 0
    assert left.cache.get_seq_length() == 0
    assert not left.turns
    left.prefill()
    assert left.cache.get_seq_length() == left.prefilled == len(left.tokens)


def test_teacher_force_steps_yield_between_chunks_and_return_what_teacher_force_returns() -> None:
    import torch

    options = EVICTING | {"chunk_size": 64}
    whole, stepped = session(**options), session(**options)
    opening = [{"role": "system", "content": words(60, "sys")}, {"role": "user", "content": words(40, "task")}]
    reply = [{"role": "assistant", "content": words(150, "reply")}]
    for s in (whole, stepped):
        s.append(opening)
        s.prefill()
    logits, ids = whole.teacher_force(reply)
    steps, pauses = stepped.teacher_force_steps(reply), 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            stepped_logits, stepped_ids = done.value
            break
        pauses += 1
        assert stepped.cache.signals.reply_from is not None  # mid-reply: its queries count as the agent's
    assert pauses == -(-len(ids) // 64) - 1 >= 1  # one pause between each two chunks of the reply
    assert stepped_ids == ids
    assert torch.equal(stepped_logits, logits)
    assert stepped.cache.signals.reply_from is None
    assert stepped.cache.signals.replies == whole.cache.signals.replies
