"""research/policies.py: the retired and experimental variants register through kvstore's public hook, each one
keeps exactly what its configuration of a product policy keeps, and `bench replay` reaches them on its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sessionlib import tiny_chat_model

import kvstore
import research.policies
from kvstore.cache.config import register_policy
from kvstore.errors import KVStoreError
from kvstore.policies import POLICIES
from kvstore.policies.nexus import NexusPolicy

ROOT = Path(__file__).resolve().parents[2]
# each variant as a product policy with options (nexus-head has no product twin: its tests are below)
AS_PRODUCT = {
    "h2o-unnormalized": ("h2o", {"h2o_normalize": False}),
    "nexus-topk": ("nexus", {"selector": "topk"}),
    "direct-reservoir": ("nexus", {"lam": 0.0}),
    "nexus-agent-window": ("nexus", {"selector": "topk", "recent_share": 0.5}),
    "nexus-agent-mean": ("nexus", {"selector": "topk", "recent_share": 0.5, "score_memory": "mean"}),
    "nexus-agent-acc": (
        "nexus-agent",
        {
            "reply_weight": 0.0,
            "own_weight": 0.0,
            "last_weight": 0.0,
            "name_weight": 0.0,
            "opening_nexus": True,
            "prefill_slack": 0,
            "opening_recent_share": None,
            "task_text_weight": 0.0,
        },
    ),
    "nexus-agent-reply": (
        "nexus-agent",
        {
            "own_weight": 0.0,
            "last_weight": 0.0,
            "name_weight": 0.0,
            "prefill_slack": 0,
            "opening_recent_share": None,
            "task_text_weight": 0.0,
        },
    ),
    "nexus-agent-tp": ("nexus-agent", {}),  # the default under another name (research/opening_first_reply.py)
    "nexus-agent-opennames": ("nexus-agent", {}),  # likewise (research/open_names.py patches its session)
}
# no product twin: tested below
OWN_TESTS = {
    "nexus-head",
    "nexus-agent-openwin",
    "nexus-agent-tokprior",
    "nexus-agent-tlevel",
    "nexus-agent-sprior",
    "nexus-agent-names",
    "nexus-agent-peak",
    "nexus-agent-task",
    "nexus-agent-tail",
    "nexus-agent-surprise",
}


def _prefilled(policy: str, **options) -> kvstore.EvictingCache:
    model = tiny_chat_model("qwen3", 4096)
    cache = kvstore.make_cache(model, policy, budget=192, block=16, seed=1, **options)
    ids = torch.randint(0, 1000, (1, 700), generator=torch.Generator().manual_seed(0))
    kvstore.prefill(model, cache, ids, chunk_size=100)
    return cache


def test_every_variant_is_registered() -> None:
    assert set(research.policies.VARIANTS) == set(AS_PRODUCT) | OWN_TESTS
    for name, (cls, options) in research.policies.VARIANTS.items():
        assert POLICIES[name] == (cls, options)


@pytest.mark.parametrize("variant", AS_PRODUCT)
def test_a_variant_keeps_what_its_product_configuration_keeps(variant: str) -> None:
    policy, options = AS_PRODUCT[variant]
    ours, theirs = _prefilled(variant), _prefilled(policy, **options)
    assert ours.config.to_dict() | {"policy": policy} == theirs.config.to_dict() and ours.stats()["tokens_evicted"]
    for a, b in zip(ours.layers, theirs.layers, strict=True):
        assert torch.equal(a.positions, b.positions)


def test_per_head_nexus_keeps_different_tokens_per_kv_head() -> None:
    positions = _prefilled("nexus-head").layers[1].positions[0]  # [Hkv, T]
    assert any(not torch.equal(positions[0], positions[h]) for h in range(1, positions.shape[0]))


def test_per_head_nexus_remembers_each_heads_own_scores() -> None:
    cache = _prefilled("nexus-head", score_memory="mean")
    layer = cache.layers[1]
    score = layer.state["nexus_score"][0]  # [Hkv, T]
    assert layer.state["nexus_steps"][0].max() >= 2 and all(layer.held() <= 192 for layer in cache.layers)
    assert any(not torch.equal(score[0], score[h]) for h in range(1, score.shape[0]))


def test_the_opening_window_changes_what_the_opening_keeps() -> None:
    ours, default = _prefilled("nexus-agent-openwin", open_weight=2.0), _prefilled("nexus-agent")
    assert all(layer.held() <= 192 for layer in ours.layers)
    assert any(not torch.equal(a.positions, b.positions) for a, b in zip(ours.layers, default.layers, strict=True))
    assert ours.layers[1].state["win_seen"].max() > 0


def test_the_token_prior_variant_without_a_prior_is_the_default() -> None:
    ours, default = _prefilled("nexus-agent-tokprior"), _prefilled("nexus-agent")
    for a, b in zip(ours.layers, default.layers, strict=True):
        assert torch.equal(a.positions, b.positions)


def _scores(policy: str, prior, **options) -> tuple[torch.Tensor, torch.Tensor]:
    """The score of layer 1 once the cache holds `prior(shape)` as a matched profile's, and the held tokens'
    prior."""
    cache = _prefilled(policy, **options)
    cache.signals.set_prior(prior(cache.signals.shape))
    ctx = cache.layers[1].score_context()
    return cache.policy.score(ctx), ctx.prior


def _template(shape) -> torch.Tensor:
    prior = torch.zeros(*shape, 700)
    prior[..., :100] = torch.rand(*shape, 100, generator=torch.Generator().manual_seed(2)) + 0.1
    return prior


def test_the_template_level_scales_the_template_against_the_rest() -> None:
    default, held = _scores("nexus-agent", _template)
    torch.testing.assert_close(_scores("nexus-agent-tlevel", _template)[0], default)
    raised = _scores("nexus-agent-tlevel", _template, template_scale=4.0)[0] - default
    assert bool((raised[held > 0] > 0).all()) and bool((raised[held == 0] <= 0).all())
    assert bool((raised[held == 0] < 0).any())


def _statement(shape) -> torch.Tensor:
    prior = _template(shape)
    prior[..., 100:300] = -torch.rand(*shape, 200, generator=torch.Generator().manual_seed(3)) - 0.1
    return prior


def test_the_statement_prior_at_blend_zero_is_the_default_with_its_template() -> None:
    """(Without the task's head: the marks leave no task span, and it was measured before the head existed.)"""
    default = _scores("nexus-agent", lambda shape: _statement(shape).clamp_min(0), task_head=0)[0]
    torch.testing.assert_close(_scores("nexus-agent-sprior", _statement, stmt_blend=0.0, task_head=0)[0], default)
    assert not torch.allclose(_scores("nexus-agent-sprior", _statement, stmt_blend=1.0, task_head=0)[0], default)


def test_the_hook_refuses_a_taken_name_and_a_bad_option() -> None:
    with pytest.raises(KVStoreError, match="'nexus' is already registered"):
        register_policy("nexus", NexusPolicy, selector="topk")
    with pytest.raises(KVStoreError, match="unknown cache option.*h2o_normalize for policy 'nexus-x'"):
        register_policy("nexus-x", NexusPolicy, h2o_normalize=False)
    assert "nexus-x" not in POLICIES


def test_the_research_entry_point_registers_the_variants_the_product_refuses(tmp_path: Path) -> None:
    """`python research/nexus_agent.py` is `nexus-agent` with the variants registered; the product alone (which
    never imports research/) answers such a spec with the one clear unknown-policy error."""
    entry = Path(__file__).resolve().parents[2] / "research" / "nexus_agent.py"
    alone = "from benchmarks.replay import parse_spec\nparse_spec('nexus-agent-reply@protect=system')\n"
    res = subprocess.run([sys.executable, "-c", alone], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "unknown policy 'nexus-agent-reply'" in res.stderr
    loaded = (
        f"import runpy\nrunpy.run_path({str(entry)!r}, run_name='loaded')\n"
        "from benchmarks.replay import parse_spec\nprint(parse_spec('nexus-agent-reply@protect=system').policy)\n"
    )
    res = subprocess.run([sys.executable, "-c", loaded], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "nexus-agent-reply", res.stderr[-2000:]
    res = subprocess.run([sys.executable, str(entry), "bench", "replay", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "--specs" in res.stdout


def test_the_names_variant_under_the_products_rules_keeps_what_the_default_keeps(tmp_path, monkeypatch) -> None:
    """research/task_names.py hands its policy the names found by its rules; at the product's rules it keeps what the
    default keeps, and counting the names on traceback frames too changes what is kept."""
    from profilelib import conversation, save_tiny_profile
    from sessionlib import qwen_tokenizer, words

    from kvstore import Session, SessionConfig
    from research.task_names import patch_session

    monkeypatch.setattr(Session, "append", Session.append)  # restored after the test
    patch_session()
    profile = str(save_tiny_profile(tmp_path / "p.pt"))
    frames = "".join(f'  File "/x/pkg_{i}/mod_{i}.py", line {i}, in run_{i}\n    self.go_{i}()\n' for i in range(12))
    task = words(200, "delta") + " fix a.b_c() and TheName.\n" + frames + words(300, "x")

    def kept(policy: str, **options) -> list[torch.Tensor]:
        options = {"chunk_size": 128, "selector": "topk"} | options
        s = Session(
            tiny_chat_model(),
            qwen_tokenizer(),
            SessionConfig(policy=policy, budget=256, profile=profile, cache_options=options),
        )
        s.append(conversation(task, replies=1)[:2])
        s.prefill()
        assert s.cache.signals.names
        return [layer.positions for layer in s.cache.layers]

    default = kept("nexus-agent")
    for a, b in zip(kept("nexus-agent-names"), default, strict=True):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(kept("nexus-agent-names", name_frames=True), default, strict=True))


def test_the_frame_rules_count_the_outermost_and_innermost_frames_of_each_traceback() -> None:
    """research/task_names.py's `name_outer` / `name_inner`: the names on the first / last frames of each traceback
    count on top of the product's; with `frame_whole` every character of those frames does (the line number too)."""
    from research.task_names import outer_frame_names

    def tb(tag: str) -> str:
        frame = '  File "/x/{t}_{i}.py", line {i}, in run_{t}_{i}\n    go_{t}_{i}()\n'
        frames = "".join(frame.format(t=tag, i=i) for i in range(3))
        return "Traceback (most recent call last):\n" + frames + f"ValueError: bad_{tag}\n"

    text = "See fix_me.\n" + tb("a") + "then\n" + tb("b")

    def found(*args) -> list[str]:
        return [text[a:b] for a, b in outer_frame_names(text, *args)]

    product = ["fix_me", "ValueError", "bad_a", "bad_b"]
    assert found(0) == product
    assert found(0, 1) == ["fix_me", "/x/a_2.py", "run_a_2", "go_a_2()", "ValueError", "bad_a"] + [
        "/x/b_2.py",
        "run_b_2",
        "go_b_2()",
        "bad_b",
    ]
    assert found(1)[1:4] == ["/x/a_0.py", "run_a_0", "go_a_0()"]
    whole = found(0, 1, True)
    assert whole[1] == '  File "/x/a_2.py", line 2, in run_a_2\n    go_a_2()\n' and len(whole) == 6


def test_the_peak_variant_remembers_the_most_one_reply_attended_each_token() -> None:
    """research/reply_peak.py: each held token keeps the largest per-query attention one earlier reply paid it,
    where the pooled reply term thins it out over the replies that did not read it; it changes what is kept."""
    from sessionlib import qwen_tokenizer, words

    from kvstore import Session, SessionConfig

    def session(budget: int, **options) -> Session:
        options = {"chunk_size": 64, "block": 16} | options
        config = SessionConfig(policy="nexus-agent-peak", budget=budget, protect="none", cache_options=options)
        s = Session(tiny_chat_model(), qwen_tokenizer(), config)
        s.append([{"role": "system", "content": words(80)}, {"role": "user", "content": words(120, "u")}])
        s.prefill()
        return s

    s = session(4096)
    layer = s.cache.layers[1]
    means, before = [], torch.zeros(2, *layer.state["reply_acc"].shape)
    for turn in range(2):
        s.teacher_force([{"role": "assistant", "content": words(30, f"a{turn}")}])
        s.append([{"role": "user", "content": words(40, f"t{turn}")}])  # a tool's output ends the reply
        s.prefill()
        now = torch.stack([layer.state["reply_acc"], layer.state["reply_seen"]])  # nothing evicted: slots = positions
        grown = now - torch.nn.functional.pad(before, (0, now.shape[-1] - before.shape[-1]))
        means.append(grown[0] / grown[1].amax(-1, keepdim=True))  # this reply's per-query attention to each token
        before = now
        assert float(layer.state["peak_sum"].abs().max()) == 0.0 and float(layer.state["peak_n"].max()) == 0.0
    peak = layer.state["peak"]
    first = torch.nn.functional.pad(means[0], (0, peak.shape[-1] - means[0].shape[-1]))
    torch.testing.assert_close(peak, torch.maximum(first, means[1]))
    opening = s.cache.signals.replies[0][0]  # the tokens both replies could attend
    pooled = (layer.state["reply_acc"] / layer.state["reply_seen"].clamp_min(1))[..., :opening]
    assert bool((peak[..., :opening] >= pooled - 1e-6).all()) and bool((peak[..., :opening] > pooled + 1e-6).any())

    def kept(weight: float) -> list[torch.Tensor]:
        s = session(160, peak_weight=weight)
        for turn in range(3):
            s.teacher_force([{"role": "assistant", "content": words(40, f"a{turn}")}])
            s.append([{"role": "user", "content": words(120, f"t{turn}")}])
            s.prefill()
        return [layer.positions for layer in s.cache.layers]

    assert any(not torch.equal(a, b) for a, b in zip(kept(0.0), kept(4.0), strict=True))
    with pytest.raises(KVStoreError, match="peak_weight"):
        kvstore.CacheConfig.from_options("nexus-agent-peak", peak_weight=-1.0)


def test_the_task_text_variant_keeps_more_of_the_task(tmp_path) -> None:
    """research/task_text.py: a bonus for every token of a matched opening's task text; at 0 it keeps what the
    default with its own task-text term off keeps."""
    from profilelib import save_tiny_profile

    profile = str(save_tiny_profile(tmp_path / "p.pt"))

    def kept(policy: str, **options) -> tuple[list[torch.Tensor], tuple[int, int]]:
        return _opening_kept(profile, policy, **options)

    span = kept("nexus-agent")[1]
    assert span is not None
    off = kept("nexus-agent", task_text_weight=0.0)[0]  # the product's own term off: the variant adds its own
    for a, b in zip(kept("nexus-agent-task", task_all_weight=0.0)[0], off, strict=True):
        assert torch.equal(a, b)

    def inside(positions: list[torch.Tensor]) -> int:
        return sum(int(((p >= span[0]) & (p < span[1])).sum()) for p in positions)

    assert inside(kept("nexus-agent-task", task_all_weight=4.0)[0]) > inside(off)


def test_the_task_tail_variant_keeps_the_task_texts_last_tokens_before_the_first_reply(tmp_path) -> None:
    """research/task_tail.py: before the first reply, the task text's last `tail_share` x budget tokens are forced
    in every head; with none and the default's recent window it keeps what the default keeps."""
    from profilelib import save_tiny_profile

    profile = str(save_tiny_profile(tmp_path / "p.pt"))

    def kept(policy: str, **options) -> tuple[list[torch.Tensor], tuple[int, int]]:
        return _opening_kept(profile, policy, **options)

    default, span = kept("nexus-agent")
    assert span is not None
    for a, b in zip(kept("nexus-agent-tail", tail_share=0.0, opening_recent_share=0.25)[0], default, strict=True):
        assert torch.equal(a, b)
    tail = torch.arange(span[1] - 64, span[1])  # a quarter of the 256-token budget
    for positions in kept("nexus-agent-tail")[0]:
        assert bool(torch.isin(tail, positions).all())
    assert not all(bool(torch.isin(tail, p).all()) for p in default)


def test_the_surprise_variant_keeps_the_task_texts_most_surprising_tokens(tmp_path, monkeypatch) -> None:
    """research/task_surprise.py: the session hands the policy the task text's most surprising positions (by the
    model's own -log p, read in chunks as the whole logits would give them); a weight far above the other terms
    keeps every one of them, and weight 0 keeps what the default keeps."""
    from profilelib import save_tiny_profile

    from kvstore import Session
    from research import task_surprise

    monkeypatch.setattr(Session, "append", Session.append)  # restored after the test
    monkeypatch.setattr(task_surprise, "CHUNK", 100)  # several chunks over the 500-word opening
    task_surprise.patch_session()
    model = tiny_chat_model()
    ids = torch.randint(0, 1000, (300,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    whole = -logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    assert torch.allclose(task_surprise.surprisal(model, ids)[1:], whole, atol=1e-4)
    nll = torch.tensor([0.0, 5.0, 1.0, 4.0, 3.0, 9.0])
    assert task_surprise.most_surprising(nll, (1, 5), 0.5).tolist() == [1, 3]
    profile = str(save_tiny_profile(tmp_path / "p.pt"))
    default, span = _opening_kept(profile, "nexus-agent")
    assert span is not None
    for a, b in zip(_opening_kept(profile, "nexus-agent-surprise", surprise_weight=0.0)[0], default, strict=True):
        assert torch.equal(a, b)
    sessions: list = []
    kept = _opening_kept(profile, "nexus-agent-surprise", sessions, surprise_weight=100.0, surprise_share=0.05)[0]
    surprising = sessions[0].cache.policy.surprising
    assert surprising is not None and 0 < len(surprising) <= 64
    assert bool(((surprising >= span[0]) & (surprising < span[1])).all())
    assert all(bool(torch.isin(surprising, p).all()) for p in kept)
    assert not all(bool(torch.isin(surprising, p).all()) for p in default)


def _opening_kept(
    profile: str, policy: str, sessions: list | None = None, **options
) -> tuple[list[torch.Tensor], tuple[int, int]]:
    """Each layer's held positions after a 500-word task opening under `policy` at a 256-token budget, with the
    profile matched, and the opening's task span; the session is appended to `sessions` when given."""
    from profilelib import conversation
    from sessionlib import qwen_tokenizer, words

    from kvstore import Session, SessionConfig

    options = {"chunk_size": 128} | options
    config = SessionConfig(policy=policy, budget=256, profile=profile, cache_options=options)
    s = Session(tiny_chat_model(), qwen_tokenizer(), config)
    s.append(conversation(words(500, "task"), replies=1)[:2])
    s.prefill()
    if sessions is not None:
        sessions.append(s)
    return [layer.positions for layer in s.cache.layers], s.cache.signals.task_span
