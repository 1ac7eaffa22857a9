"""The default memory `nexus-agent` (kvstore.policies.nexus_agent.NexusAgentPolicy): per kv head and per token, the
attention each token received from every query so far, its block's remembered per-head Nexus score, and the
attention it received from the agent's own replies (the session marks them)."""

from __future__ import annotations

import pytest
import torch
from sessionlib import qwen_tokenizer, tiny_chat_model, words

import kvstore
from kvstore import Session, SessionConfig
from kvstore.cache.forwarding import chunk_end
from kvstore.cache.snapshot import export_state, restore_cache
from kvstore.errors import KVStoreError
from kvstore.session.reply import ReplyInProgress


def _prefilled(policy: str, budget: int = 192, **options):
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, policy, budget=budget, block=16, **options)
    ids = torch.randint(0, 1000, (1, 700), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids, chunk_size=100)
    return model, cache


def test_it_accumulates_the_attention_h2o_accumulates() -> None:
    _, ours = _prefilled("nexus-agent", budget=4096)  # nothing evicted: both saw every query over every token
    _, h2o = _prefilled("h2o", budget=4096)
    for a, b in zip(ours.layers, h2o.layers, strict=True):
        torch.testing.assert_close(a.state["acc"], b.state["h2o_acc"])
        assert a.state["nexus_steps"].max() == 0  # no eviction step yet: the Nexus score was never remembered


def test_both_parts_decide_what_is_kept_per_kv_head() -> None:
    one = {"opening_nexus": True, "prefill_slack": 0}  # an eviction step after each chunk: the score is remembered
    _, ours = _prefilled("nexus-agent", **one)
    _, attention_only = _prefilled("nexus-agent", **one, acc_weight=1e9)
    _, nexus_only = _prefilled("nexus-agent", **one, acc_weight=0.0)
    layer = ours.layers[1]
    assert layer.state["nexus_steps"].max() >= 2
    assert all(x.held() <= 192 for x in ours.layers)
    pos = layer.positions[0]  # [Hkv, T]: each kv head keeps its own tokens
    assert any(not torch.equal(pos[0], pos[h]) for h in range(1, pos.shape[0]))
    for other in (attention_only, nexus_only):
        assert any(not torch.equal(a.positions, b.positions) for a, b in zip(ours.layers, other.layers, strict=True))


def test_without_a_profile_the_opening_is_ranked_by_its_attention_alone_until_the_first_reply() -> None:
    _, ours = _prefilled("nexus-agent", prefill_slack=0)  # evicted after each chunk, as H2O is
    _, h2o = _prefilled("h2o", sink=16)  # the same forced set: one 16-token sink block, half of the budget recent
    assert ours.layers[1].state["nexus_steps"].max() >= 2  # the Nexus score is still remembered meanwhile
    for a, b in zip(ours.layers, h2o.layers, strict=True):
        assert torch.equal(a.positions, b.positions)
    layer = ours.layers[1]
    assert float(ours.policy._nexus_on(layer.score_context(), torch.float32).max()) == 0.0
    with torch.inference_mode():  # the cache's state tensors are inference tensors
        layer.state["reply_seen"][..., :5] = 1.0  # a reply query has been seen: the Nexus term counts again
        assert float(ours.policy._nexus_on(layer.score_context(), torch.float32).min()) == 1.0
        layer.state["reply_seen"].zero_()
    ours.signals.set_prior(torch.ones(len(ours.layers), layer.keys.shape[1], 100), "tokens")  # a token prior
    assert float(ours.policy._nexus_on(layer.score_context(), torch.float32).max()) == 0.0  # waits, as with none
    ours.signals.set_prior(torch.ones(len(ours.layers), layer.keys.shape[1], 100))  # a profile ranks the template
    assert ours.policy._nexus_on(layer.score_context(), torch.float32) == 1.0


@pytest.mark.parametrize("blend", [0.0, 0.5, 1.0])
def test_a_token_prior_is_blended_with_the_attention(blend: float) -> None:
    from kvstore.policies.base import mean_received
    from kvstore.policies.nexus_agent import _unit_mean, with_prior

    _, cache = _prefilled("nexus-agent", token_blend=blend)
    layer = cache.layers[1]
    prior = torch.rand(len(cache.layers), layer.keys.shape[1], 700, generator=torch.Generator().manual_seed(1)) + 0.1
    cache.signals.set_prior(prior, "tokens")
    ctx = layer.score_context()
    acc = mean_received(ctx.state["acc"], ctx)
    want = (1 - blend) * _unit_mean(acc) + blend * _unit_mean(with_prior(acc, ctx.prior))
    # no reply yet: the reply term, the own-token bonus and the Nexus term all add nothing
    torch.testing.assert_close(cache.policy.score(ctx), want)
    if blend == 0.0:  # the prior counts for nothing: the ranking of the opening is its attention alone
        cache.signals.prior = None
        torch.testing.assert_close(cache.policy.score(layer.score_context()), _unit_mean(acc))


# what `nexus-agent` was before (research/policies.py keeps them by name) as today's policies and options, and an
# option today's `nexus-agent` has that the earlier definition's saved config lacked
EARLIER = {
    "nexus-agent-mean": ("nexus", {"selector": "topk", "recent_share": 0.5, "score_memory": "mean"}, "acc_weight"),
    "nexus-agent-acc": ("nexus-agent", {"reply_weight": 0.0, "own_weight": 0.0, "opening_nexus": True}, "reply_weight"),
    "nexus-agent-reply": ("nexus-agent", {"own_weight": 0.0}, "own_weight"),
}
OLDER = "saved by an older version of nexus-agent .* start a new session"


@pytest.mark.parametrize("earlier", EARLIER)
def test_a_session_saved_under_an_earlier_definition_is_refused_clearly(earlier: str) -> None:
    policy, options, lacked = EARLIER[earlier]
    model, cache = _prefilled(policy, **options)
    tensors, meta = export_state(cache)
    meta["config"]["policy"] = "nexus-agent"
    meta["config"].pop(lacked, None)
    with pytest.raises(KVStoreError, match=OLDER):
        restore_cache(model, tensors, meta)
    restored = restore_cache(model, *export_state(_prefilled("nexus-agent")[1]))  # today's definition: fine
    assert restored.policy.token_state == ("acc", "reply_acc", "reply_seen", "nexus_score", "nexus_steps")


def test_a_saved_state_of_another_definition_is_refused_clearly() -> None:
    model, mean = _prefilled("nexus", **EARLIER["nexus-agent-mean"][1])
    tensors, meta = export_state(mean)
    meta["config"] = export_state(_prefilled("nexus-agent")[1])[1]["config"]  # every option there, but not its state
    with pytest.raises(KVStoreError, match=OLDER.replace(".*", r".*per-token state \['nexus_score', 'nexus_ste.*")):
        restore_cache(model, tensors, meta)
    meta = export_state(mean)[1]
    meta.pop("replies")  # a cache state from before the agent's replies were recorded
    with pytest.raises(KVStoreError, match=OLDER.replace(".*", ".*no replies.*")):
        restore_cache(model, tensors, meta)


def test_a_config_saved_with_every_policys_options_restores_as_its_own() -> None:
    """Sessions saved while every option was a field of one flat config hold every policy's options: the policy's
    own are read, the others left out; one that no longer exists restores only at the value that meant "off"."""
    model, cache = _prefilled("nexus-agent")
    tensors, meta = export_state(cache)
    flat = {"h2o_normalize": True, "pool": "avg", "morph_agg": "sum", "pool_kernel": 5, "pyramid_beta": 20.0}
    meta["config"] |= flat | {"ada_floor": 0.2, "renorm_candidates": False, "pyramid_spread": None}
    assert restore_cache(model, tensors, meta).config == cache.config
    meta["config"]["renorm_candidates"] = True
    with pytest.raises(KVStoreError, match=OLDER):
        restore_cache(model, tensors, meta)


@pytest.mark.parametrize(
    "option", ["acc_weight", "reply_weight", "own_weight", "last_weight", "task_head", "task_weight", "name_weight"]
)
def test_a_negative_weight_is_refused(option: str) -> None:
    with pytest.raises(KVStoreError, match=option):
        kvstore.CacheConfig.from_options("nexus-agent", **{option: -1.0})


def _session(
    policy: str = "nexus-agent", budget: int | None = None, protocol: str = "true-eviction", **options
) -> Session:
    options = {"chunk_size": 64, "block": 16} | options
    config = SessionConfig(policy=policy, budget=budget, protect="none", cache_options=options, protocol=protocol)
    return Session(tiny_chat_model(), qwen_tokenizer(), config)


def _reply_seen(session: Session) -> torch.Tensor:
    return session.cache.layers[0].state["reply_seen"][0, 0]  # [T]: reply queries that could attend each token


def test_only_the_agents_own_replies_count_as_reply_attention() -> None:
    s = _session()
    s.append([{"role": "system", "content": words(80)}, {"role": "user", "content": words(120, "u")}])
    s.prefill()
    assert s.cache.signals.reply_from is None
    assert _reply_seen(s).max() == 0  # the opening's queries are not the agent's
    start = s.num_tokens
    reply = s.generate(max_new_tokens=6, temperature=1.0)
    assert s.cache.signals.reply_from is None  # closed with the reply
    seen = _reply_seen(s)
    # the generation prompt and every generated token ran as reply queries, except the last token (never run)
    ran = s.prefilled - start
    assert ran == len(s.renderer.generation_prompt_ids) + len(reply.token_ids) - 1
    assert int(seen[0]) == ran
    assert int(seen[-1]) == 1  # causal: the newest held token saw only its own query
    assert s.cache.layers[0].state["reply_acc"][0, 0, :start].sum() > 0
    s.append([{"role": "user", "content": words(60, "t")}])  # a tool's output: not the agent's queries
    s.prefill()
    assert int(_reply_seen(s)[0]) == ran
    s.teacher_force([{"role": "assistant", "content": words(20, "a")}])  # a recorded reply counts like a generated one
    assert int(_reply_seen(s)[0]) > ran
    assert s.cache.signals.reply_from is None
    assert _reply_seen(s)[-4:].tolist() == [4.0, 3.0, 2.0, 1.0]  # causal: the newest tokens saw fewer reply queries


@pytest.mark.parametrize("driver", ["generate", "stepwise"])
def test_a_reply_begins_after_the_message_before_it_is_evicted(driver: str) -> None:
    """The generation prompt's queries are the reply's; they run after the message before them has been evicted,
    one token at a time like the reply's decoding, as `bench replay` measures a recorded reply (teacher_force). Had
    they shared the message's last chunk, the reply term would have ranked that chunk's eviction on three queries."""
    opening = [{"role": "system", "content": words(80)}, {"role": "user", "content": words(150, "u")}]
    ours, apart = _session(budget=96, chunk_size=512), _session(budget=96, chunk_size=512)
    ours.append(opening)
    apart.append(opening)
    apart.prefill()  # the opening on its own, evicted at its end
    assert apart.num_tokens < ours.config.chunk_size  # one chunk: without the boundary it would hold the prompt too
    if driver == "generate":
        reply = ours.generate(max_new_tokens=5)
    else:
        step = ReplyInProgress(ours, 5)
        step.prefill()
        while step.next_input is not None:
            step.step_alone()
        reply = step.finish()
    assert reply.token_ids == apart.generate(max_new_tokens=5).token_ids
    for a, b in zip(ours.cache.layers, apart.cache.layers, strict=True):
        assert torch.equal(a.positions, b.positions)
        torch.testing.assert_close(a.state["reply_acc"], b.state["reply_acc"])


def test_a_replys_generation_prompt_is_prefilled_apart_one_token_at_a_time() -> None:
    def chunks(total: int, size: int, reply=None) -> list[int]:
        ends, start = [], 0
        while start < total:
            start = chunk_end(start, total, size, reply)
            ends.append(start)
        return ends

    assert chunks(10, 4) == [4, 8, 10]
    assert chunks(10, 4, (7, 10)) == [4, 7, 8, 9, 10]  # the message's chunks end where the prompt begins
    assert chunks(10, 4, (8, 10)) == [4, 8, 9, 10]
    assert chunks(3, 4, (0, 3)) == [1, 2, 3]  # only the prompt is pending (the message ran before)
    assert chunks(3, 4, (-1, 2)) == [1, 2, 3]  # part of it ran: the rest goes on one token at a time


def _three_turns(s: Session) -> Session:
    """An opening, then three teacher-forced replies, each followed by a tool's output."""
    s.append([{"role": "system", "content": words(120)}, {"role": "user", "content": words(200, "u")}])
    s.prefill()
    for turn in range(3):
        s.teacher_force([{"role": "assistant", "content": words(40, f"a{turn}")}])
        s.append([{"role": "user", "content": words(120, f"t{turn}")}])
        s.prefill()
    return s


def test_the_reply_term_changes_what_is_kept() -> None:
    kept = {}
    for reply_weight in (1.0, 0.0):  # the other terms as nexus-agent-acc and nexus-agent-reply had them
        s = _three_turns(_session(budget=160, opening_nexus=True, own_weight=0.0, reply_weight=reply_weight))
        kept[reply_weight] = [layer.positions for layer in s.cache.layers]
        assert all(layer.held() <= 160 for layer in s.cache.layers)
    assert "reply_acc" not in s.cache.layers[0].state  # without the reply term no reply state is kept
    assert any(not torch.equal(a, b) for a, b in zip(*kept.values(), strict=True))


def test_a_re_prefill_counts_every_earlier_reply_as_the_agents_own() -> None:
    """Under re-prefill each turn runs the whole history again; the queries of the earlier replies (generated,
    teacher-forced, or given as history) count as the agent's there as they did when they first ran, so with
    nothing evicted the reply term is the one a true-eviction session accumulated."""
    caches = {}
    for protocol in ("true-eviction", "re-prefill"):
        s = _session(budget=4096, protocol=protocol)
        s.append([{"role": "system", "content": words(80)}, {"role": "user", "content": words(120, "u")}])
        s.generate(max_new_tokens=6, temperature=0.0)
        s.append([{"role": "user", "content": words(60, "t")}])
        s.prefill()
        s.teacher_force([{"role": "assistant", "content": words(20, "a")}])
        s.append([{"role": "user", "content": words(30, "v")}, {"role": "assistant", "content": words(15, "h")}])
        s.append([{"role": "user", "content": words(40, "w")}])
        s.prefill()
        caches[protocol] = s.cache
    ours, theirs = caches["re-prefill"], caches["true-eviction"]
    replies = ours.signals.replies
    assert replies == theirs.signals.replies
    assert len(replies) == 3  # generated, teacher-forced, given as history
    for a, b in zip(ours.layers, theirs.layers, strict=True):
        assert a.held() == b.held() == s.num_tokens  # nothing evicted: the same tokens in both
        torch.testing.assert_close(a.state["reply_seen"], b.state["reply_seen"])
        torch.testing.assert_close(a.state["reply_acc"], b.state["reply_acc"], rtol=1e-3, atol=1e-5)
    seen = ours.layers[0].state["reply_seen"][0, 0]
    assert int(seen[0]) == sum(end - start for start, end in replies)  # every reply query saw the first token
    assert int(seen[-1]) == 0  # the last user message's queries are not the agent's
    tensors, meta = export_state(ours)
    assert restore_cache(tiny_chat_model(), tensors, meta).signals.replies == replies  # saved with the session


def test_own_weight_ranks_up_the_tokens_the_agents_replies_wrote() -> None:
    """`own_weight` adds a bonus to every held token a reply wrote (its generation prompt included), read from the
    cache's reply spans, with no per-token state of its own."""
    s = _session(budget=4096, own_weight=1.0)
    assert s.cache.policy.token_state == ("acc", "reply_acc", "reply_seen", "nexus_score", "nexus_steps")
    s.append([{"role": "system", "content": words(80)}, {"role": "user", "content": words(120, "u")}])
    s.prefill()
    start, layer = s.num_tokens, s.cache.layers[0]
    s.cache.signals.reply_from = start - 10  # a reply running now (as Session.begin_reply marks it) counts as it runs
    assert layer.score_context().own[0, 0, start - 10 :].all()
    assert not layer.score_context().own[0, 0, :-10].any()
    s.cache.signals.reply_from = None
    s.generate(max_new_tokens=6)
    s.append([{"role": "user", "content": words(30, "t")}])
    s.prefill()
    s.teacher_force([{"role": "assistant", "content": words(20, "a")}])
    s.append([{"role": "user", "content": words(40, "w")}])
    s.prefill()
    own = layer.score_context().own[0, 0]
    assert s.cache.signals.replies[0][0] == start
    assert int(own.sum()) == sum(b - a for a, b in s.cache.signals.replies)
    for a, b in s.cache.signals.replies:
        assert own[a:b].all()
    kept = {}
    for weight in (0.0, 4.0):
        s = _three_turns(_session(budget=160, own_weight=weight, last_weight=0.0))
        positions = torch.cat([layer.positions.flatten() for layer in s.cache.layers])
        kept[weight] = sum(int(((positions >= a) & (positions < b)).sum()) for a, b in s.cache.signals.replies)
        assert (s.cache.layers[0].score_context().own is None) == (weight == 0)
    assert kept[4.0] > kept[0.0]


def test_last_weight_ranks_up_the_latest_reply_only() -> None:
    """`last_weight` adds a bonus to the held tokens of the agent's latest finished reply, on top of `own_weight`:
    the reply an agent most often continues (the next command of the same file, the same edit again)."""
    s = _three_turns(_session(budget=4096))
    assert s.cache.policy.settings.last_weight == 3.0  # the default memory's
    layer = s.cache.layers[0]
    ctx = layer.score_context()
    a, b = s.cache.signals.replies[-1]
    last = ctx.last_own[0, 0]
    assert int(last.sum()) == b - a and bool(last[a:b].all())  # nothing evicted at this budget: positions = slots
    assert bool(ctx.own[0, 0].sum() > last.sum())  # the earlier replies are own tokens, not the latest
    bonus = layer.owner.policy.score(ctx) - _session(budget=4096, last_weight=0.0).cache.policy.score(ctx)
    torch.testing.assert_close(bonus[0, 0], 3.0 * last.float())
    kept = {}
    for weight in (0.0, 6.0):
        s = _three_turns(_session(budget=160, last_weight=weight))
        a, b = s.cache.signals.replies[-1]
        positions = torch.cat([layer.positions.flatten() for layer in s.cache.layers])
        kept[weight] = int(((positions >= a) & (positions < b)).sum())
    assert kept[6.0] > kept[0.0]


def test_a_session_saved_before_the_latest_reply_bonus_runs_on_without_it() -> None:
    """A saved config without `last_weight` (saved before it existed) restores with 0: the score it ran with."""
    model, cache = _prefilled("nexus-agent")
    assert cache.config.settings.last_weight == 3.0
    tensors, meta = export_state(cache)
    del meta["config"]["last_weight"]
    back = restore_cache(model, tensors, meta)
    assert back.config.settings.last_weight == 0.0 and back.config.settings.own_weight == 1.0


def _profiled(opening_recent_share: float | None):
    """The 700-token opening of `_prefilled` with a profile matched on its first 100 tokens (all template)."""
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, "nexus-agent", budget=192, block=16, opening_recent_share=opening_recent_share)
    cache.signals.set_prior(torch.ones(len(cache.layers), model.config.num_key_value_heads, 100))
    ids = torch.randint(0, 1000, (1, 700), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids, chunk_size=100)
    return cache


def test_an_opening_a_profile_matched_keeps_its_own_recent_share_until_the_first_reply() -> None:
    cache = _profiled(0.25)
    policy, layer = cache.policy, cache.layers[1]
    assert policy.recent_tokens(192, layer.score_context()) == 48  # a quarter of the layer budget, not half
    assert policy.recent_tokens(192) == 96  # the budget checks count the most it can be
    for layer in cache.layers:  # every head holds the last 48 tokens; the 48 before them are ranked
        pos = layer.positions[0]  # [Hkv, T]
        assert all(set(range(652, 700)) <= set(p.tolist()) for p in pos)
        assert layer.held() <= 192
    assert any(not set(range(604, 652)) <= set(p.tolist()) for layer in cache.layers for p in layer.positions[0])
    default = _profiled(None)
    assert all(set(range(604, 700)) <= set(p.tolist()) for layer in default.layers for p in layer.positions[0])
    assert default.policy.recent_tokens(192, default.layers[1].score_context()) == 96
    with torch.inference_mode():  # the cache's state tensors are inference tensors
        layer.state["reply_seen"][..., :5] = 1.0  # once a reply query has been seen: the recent share again
        assert policy.recent_tokens(192, layer.score_context()) == 96
        layer.state["reply_seen"].zero_()
    cache.signals.set_prior(torch.ones(len(cache.layers), layer.keys.shape[1], 100), "tokens")  # no profile matched
    assert policy.recent_tokens(192, layer.score_context()) == 96
    with pytest.raises(KVStoreError, match="opening_recent_share must be in"):
        kvstore.make_cache(tiny_chat_model("qwen3", 4096), "nexus-agent", budget=192, opening_recent_share=1.0)
