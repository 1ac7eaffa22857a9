"""The set oracle of `bench replay --oracle`: an evicting cache that ranks, per kv head, by the attention the next
reply gives each token on the full cache (recorded during the reference replay)."""

from __future__ import annotations

import os

import pytest
import torch
from clilib import GOLD_DIR
from sessionlib import qwen_tokenizer, tiny_chat_model
from transformers import AttentionInterface
from typer.testing import CliRunner

from benchmarks.replay import ReplayConfig, run
from benchmarks.replay_oracle import HORIZONS, OraclePolicy, ReplyAttention, parse_horizons
from benchmarks.replay_run import reference
from cli.app import app
from kvstore import CacheConfig, Session, SessionConfig
from kvstore.models.tiny import tiny_model
from kvstore.policies.base import ScoreContext
from kvstore.session.render import ChatRenderer
from kvstore.session.teacher import plan
from pipeline.conversations import load_conversation

TRAJECTORY = GOLD_DIR / "nexus-demo__invoicer-1.gold.jsonl"
MAX_TOKENS = 2600  # the opening and its first replies


def _recorded(chunk_size: int):
    """The tiny model's full-cache reference replay of the gold trajectory with its replies' attention recorded."""
    model, tokenizer = tiny_chat_model(), qwen_tokenizer()
    p = plan(load_conversation(TRAJECTORY).messages, ChatRenderer(tokenizer), MAX_TOKENS)
    session = Session(model, tokenizer, SessionConfig(policy="full", budget=None, chunk_size=chunk_size))
    record = ReplyAttention(len(session.cache.layers))
    with record.recording(model):
        reference(session, p, record)
    return record, session.tokens


@pytest.mark.slow  # three replays of the tiny model and one eager forward: ~20 s
def test_the_record_is_each_replys_attention_on_the_full_cache_however_the_reply_is_chunked() -> None:
    record, tokens = _recorded(chunk_size=512)
    assert len(record.ends) >= 2
    assert list(record.ends.values()) == sorted(record.ends.values())
    # the same weights with eager attention, which returns its probabilities: one forward over the whole conversation
    vocab = len(qwen_tokenizer())
    eager = tiny_model(impl="eager", seed=0, vocab_size=vocab, max_positions=4096, tie_word_embeddings=False)
    with torch.no_grad():
        attentions = eager(torch.tensor([tokens]), output_attentions=True).attentions  # per layer [1, Hq, T, T]
    for turn, end in record.ends.items():
        start = record.starts[turn]
        assert 0 < start < end <= len(tokens)
        for layer, att in enumerate(attentions):
            got = record.tables[turn][layer]  # [Hkv, end]
            want = att[0, :, start:end, :end].sum(1).view(2, 2, end).mean(1)  # summed over its queries, per kv head
            assert got.shape == (2, end), (turn, layer)
            assert torch.allclose(got, want, atol=1e-4), (turn, layer)
    chunked, _ = _recorded(chunk_size=64)  # a reply over several forwards sums its queries' attention
    assert chunked.starts == record.starts
    assert chunked.ends == record.ends
    for turn in record.ends:
        for a, b in zip(record.tables[turn], chunked.tables[turn], strict=True):
            assert torch.allclose(a, b, atol=1e-4)


def test_the_oracles_score_held_tokens_by_the_replies_still_to_come() -> None:
    record = ReplyAttention(num_layers=1)
    record.tables = {1: [torch.arange(20.0).view(2, 10)], 2: [-torch.arange(40.0).view(2, 20)]}
    record.starts, record.ends = {1: 8, 2: 15}, {1: 10, 2: 20}
    positions = torch.tensor([[[0, 3, 7], [1, 2, 8]]])

    def score(horizon: str, seen: int) -> list:
        policy = OraclePolicy(CacheConfig(policy="h2o", budget=4), record, horizon)
        ctx = ScoreContext(
            keys=torch.zeros(1, 2, 3, 4),
            queries=torch.zeros(1, 4, 1, 4),
            positions=positions,
            state={},
            scaling=None,
            layer_idx=0,
            seen=seen,
        )
        return policy.score(ctx).tolist()

    reply1, reply2 = [[[0, 3, 7], [11, 12, 18]]], [[[0, -3, -7], [-21, -22, -28]]]
    assert score("next", 8) == reply1  # before reply 1 ends: reply 1's attention
    assert score("next", 10) == reply2  # reply 1 ran: reply 2's
    assert score("future", 8) == (torch.tensor(reply1) + torch.tensor(reply2)).tolist()  # both still to come
    assert score("future", 12) == reply2
    assert score("next", 20) == score("future", 20) == positions.float().tolist()  # past the last: the most recent
    policy = OraclePolicy(CacheConfig(policy="h2o", budget=4), record)
    assert policy.sink_tokens() == 0
    assert policy.recent_tokens(4) == 0  # nothing forced: the ranking alone decides
    assert parse_horizons("future, next,future") == ("future", "next")
    assert parse_horizons(None) == ()
    with pytest.raises(ValueError, match="unknown horizon 'last'"):
        parse_horizons("next,last")


@pytest.mark.slow  # a reference and four evicting replays of the tiny model: ~15 s
def test_bench_replay_runs_the_oracle_under_each_budget() -> None:
    model, tokenizer = tiny_chat_model(), qwen_tokenizer()
    base = AttentionInterface._global_mapping["sdpa"]
    cfg = ReplayConfig((), (1.0, 150), MAX_TOKENS, traces=[TRAJECTORY], oracle=("next", "future"))
    result = run(cfg, model, tokenizer)
    runs = {(r["spec"], r["budget"]): r["turns"] for r in result["runs"]}
    assert set(runs) == {(label, b) for label in HORIZONS.values() for b in (1.0, 150)}
    for label in HORIZONS.values():
        assert all(t["kl"] < 1e-4 for t in runs[(label, 1.0)])
        assert all(t["top1"] == t["tokens"] for t in runs[(label, 1.0)])
        assert sum(t["kl"] for t in runs[(label, 150)]) > 1e-3
        assert all(t["held"] <= 150 for t in runs[(label, 150)])  # a true evicting cache at the budget
    first = [runs[(label, 150)][0]["kl"] for label in HORIZONS.values()]
    assert first[0] != first[1]  # the horizons keep different tokens before the first reply
    assert AttentionInterface._global_mapping["sdpa"] is base  # the model's attention is restored afterwards


@pytest.mark.slow  # two references and two evicting replays of the tiny model: ~10 s
def test_an_oracle_may_evict_each_message_once_as_the_default_memory_does() -> None:
    model, tokenizer = tiny_chat_model(), qwen_tokenizer()
    runs = {}
    for slack in (0, 4096):
        cfg = ReplayConfig((), (150,), MAX_TOKENS, traces=[TRAJECTORY], oracle=("next",), oracle_slack=slack)
        (r,) = run(cfg, model, tokenizer)["runs"]
        runs[r["spec"]] = r["turns"]
    per_chunk, once = runs.pop(HORIZONS["next"]), runs.pop(f"{HORIZONS['next']}@prefill_slack=4096")
    assert all(t["held"] <= 150 for t in once)  # still a true evicting cache at the budget before each reply
    # the opening's later chunks were computed beside the whole opening, not beside a cache evicted per chunk
    assert once[0]["kl"] != per_chunk[0]["kl"]


def test_specs_may_be_empty_only_beside_the_bound_or_the_oracle(tmp_path) -> None:
    env = os.environ | {"NEXUS_SHARED_DATA": str(tmp_path)}
    result = CliRunner().invoke(app, ["bench", "replay", str(TRAJECTORY), "--specs", ""], env=env)
    assert result.exit_code != 0
    assert "--specs names no memory" in str(result.exception) + result.output


def test_the_oracle_needs_sdpa_attention() -> None:
    with pytest.raises(Exception, match="sdpa"), ReplyAttention(2).recording(tiny_model(impl="eager")):
        pass
