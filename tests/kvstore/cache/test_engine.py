"""The static-buffer engine (kvstore.cache.buffers, the default) against the concatenating one (engine="eager"): in
fp32 the same greedy tokens, logits and kept positions for every registered policy, saved and restored states that
continue alike, and buffers that decoding never reallocates; the CPU decode attention against sdpa."""

import pytest
import torch
from tinymodels import random_ids, tiny_model

import kvstore
from kvstore import KVStoreError
from kvstore.cache.config import CacheConfig
from kvstore.policies import POLICIES
from kvstore.session.batch import batched_decode


def _decode(model, cache, ids: torch.Tensor, steps: int) -> tuple[list[int], torch.Tensor]:
    logits = kvstore.prefill(model, cache, ids, chunk_size=256)
    tokens, out = [], []
    for _ in range(steps):
        tokens.append(int(logits.argmax(-1)))
        logits = kvstore.forward(model, cache, torch.tensor([[tokens[-1]]]))[:, -1]
        out.append(logits)
    return tokens, torch.stack(out)


def _state(cache) -> list[dict[str, torch.Tensor]]:
    """Every layer's held tensors, copied (positions, keys, values, the head mask, the policy's per-token state)."""
    rows = []
    for layer in cache.layers:
        row = {"positions": layer.positions, "keys": layer.keys, "values": layer.values, "valid": layer.valid}
        rows.append({k: v.clone() for k, v in (row | layer.state).items() if v is not None})
    return rows


def _assert_same(a, b) -> None:
    assert len(a) == len(b)
    for la, lb in zip(a, b, strict=True):
        assert la.keys() == lb.keys()
        assert torch.equal(la["positions"], lb["positions"])  # the same tokens were kept
        for name in la:
            torch.testing.assert_close(la[name], lb[name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_static_engine_matches_eager_for_every_policy(policy: str) -> None:
    model = tiny_model()
    ids = random_ids(900, seed=3)
    runs = {}
    for engine in ("eager", "static"):
        cache = kvstore.make_cache(model, policy, budget=256, seed=5, engine=engine)
        cache.flush_observations()
        runs[engine] = (*_decode(model, cache, ids, 80), cache)
    (tok_e, log_e, eager), (tok_s, log_s, static) = runs["eager"], runs["static"]
    assert tok_s == tok_e
    torch.testing.assert_close(log_s, log_e, atol=1e-5, rtol=0)
    eager.flush_observations(), static.flush_observations()
    _assert_same(_state(static), _state(eager))
    st_e, st_s = eager.stats(), static.stats()
    for key in ("tokens_held", "tokens_evicted", "eviction_steps", "bytes_held", "tokens_held_per_head"):
        assert st_s[key] == st_e[key], key
    if POLICIES[policy][0].evicts and not POLICIES[policy][0].prefill_only:
        assert st_s["eviction_steps"] > len(static.layers)  # decode evicted too, not only the prefill


@pytest.mark.parametrize("policy", ["nexus-agent", "h2o", "nexus"])
def test_decoding_never_reallocates_the_buffers(policy: str) -> None:
    model = tiny_model()
    cache = kvstore.make_cache(model, policy, budget=256, seed=0)
    _decode(model, cache, random_ids(1000), 8)
    buffers = lambda: [(n, t.data_ptr(), t.shape) for layer in cache.layers for n, t in layer.store.tensors.items()]
    before, allocated = buffers(), [layer.allocated_bytes() for layer in cache.layers]
    steps = cache.stats()["eviction_steps"]
    logits = kvstore.forward(model, cache, torch.tensor([[1]]))[:, -1]
    for _ in range(150):  # several eviction steps (one per decode slack of 32 tokens; block policies up to 63)
        logits = kvstore.forward(model, cache, logits.argmax(-1).view(1, 1))[:, -1]
    assert cache.stats()["eviction_steps"] >= steps + 2 * len(cache.layers)
    assert buffers() == before  # written and compacted in place
    assert [layer.allocated_bytes() for layer in cache.layers] == allocated
    # what a prefill chunk needs (budget + chunk: 256 here), more than decoding (budget + slack + 1); with
    # prefill_slack (the default memory's) a message grew it more, and its eviction gave that back down to budget +
    # the configured chunk
    chunk = cache.config.chunk_size if cache.config.prefill_slack else 256
    for layer in cache.layers:
        assert layer.store.tensors["keys"].shape[2] == 256 + chunk
        assert layer.held() <= 256 + 32


def test_full_cache_grows_by_doubling() -> None:
    model = tiny_model()
    cache = kvstore.make_cache(model, "full", budget=None)
    kvstore.prefill(model, cache, random_ids(300), chunk_size=128)
    caps = {cache.layers[0].store.tensors["keys"].shape[2]}
    for _ in range(400):
        kvstore.forward(model, cache, torch.tensor([[3]]))
        caps.add(cache.layers[0].store.tensors["keys"].shape[2])
    assert sorted(caps) == [512, 1024]  # chunks of 128 filled 128, then 256, then 512 (300 tokens); decoding 1024
    assert cache.layers[0].held() == 700
    assert cache.stats()["bytes_held"] < sum(layer.allocated_bytes() for layer in cache.layers)


@pytest.mark.parametrize("policy", ["nexus-agent", "ada-snapkv"])
def test_saved_state_is_a_copy_and_continues_alike(policy: str) -> None:
    model = tiny_model()
    cache = kvstore.make_cache(model, policy, budget=256, seed=1)
    tokens, _ = _decode(model, cache, random_ids(900, seed=2), 20)
    tensors, meta = kvstore.export_state(cache)
    saved = {k: v.clone() for k, v in tensors.items()}
    restored = kvstore.restore_cache(model, tensors, meta)
    nxt = torch.tensor([[tokens[-1]]])
    a, b = [], []
    for _ in range(60):  # both continue: the live cache writes in place; the export must not move
        a.append(kvstore.forward(model, cache, nxt)[:, -1])
        b.append(kvstore.forward(model, restored, nxt)[:, -1])
        nxt = a[-1].argmax(-1).view(1, 1)
    assert all(torch.equal(saved[k], tensors[k]) for k in saved)
    torch.testing.assert_close(torch.stack(b), torch.stack(a), atol=1e-5, rtol=0)
    cache.flush_observations(), restored.flush_observations()
    _assert_same(_state(restored), _state(cache))


def test_batched_decode_matches_solo_on_either_engine() -> None:
    model = tiny_model()
    caches = {}
    for engine in ("eager", "static"):
        caches[engine] = [kvstore.make_cache(model, "nexus-agent", budget=256, engine=engine) for _ in range(3)]
        for i, cache in enumerate(caches[engine]):
            kvstore.prefill(model, cache, random_ids(400 + 150 * i, seed=i), chunk_size=256)
    solo = [kvstore.make_cache(model, "nexus-agent", budget=256) for _ in range(3)]
    for i, cache in enumerate(solo):
        kvstore.prefill(model, cache, random_ids(400 + 150 * i, seed=i), chunk_size=256)
    for step in range(70):
        ids = [(7 * step + i) % 100 for i in range(3)]
        batched = {engine: batched_decode(model, caches[engine], ids) for engine in caches}
        alone = torch.cat(
            [kvstore.forward(model, c, torch.tensor([[t]]))[:, -1] for c, t in zip(solo, ids, strict=True)]
        )
        torch.testing.assert_close(batched["static"], batched["eager"], atol=1e-5, rtol=0)
        torch.testing.assert_close(batched["static"], alone, atol=1e-4, rtol=0)
    for a, b in zip(caches["static"], solo, strict=True):
        assert all(torch.equal(x.positions, y.positions) for x, y in zip(a.layers, b.layers, strict=True))


def test_a_batch_on_the_cpu_attends_each_session_over_its_own_buffers(monkeypatch) -> None:
    """No padded copy of the sessions' keys (kvstore.session.batch, `attend`), the policies' statistics from each
    row's pass, the logits of solo steps; an attention variant the per-row pass does not do takes the padded batch."""
    from kvstore.cache import capture
    from kvstore.session import batch

    model = tiny_model()
    caches, solo = ([kvstore.make_cache(model, p, budget=256) for p in ("nexus-agent", "h2o", "full")] for _ in "ab")
    for i, (a, b) in enumerate(zip(caches, solo, strict=True)):
        for cache in (a, b):
            kvstore.prefill(model, cache, random_ids(300 + 150 * i, seed=i), chunk_size=256)
    padded = []
    real = batch._right_aligned
    monkeypatch.setattr(batch, "_right_aligned", lambda *a: padded.append(1) or real(*a))
    for step in range(40):
        ids = [(5 * step + i) % 100 for i in range(3)]
        got = batched_decode(model, caches, ids)
        want = torch.cat(
            [kvstore.forward(model, c, torch.tensor([[t]]))[:, -1] for c, t in zip(solo, ids, strict=True)]
        )
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert padded == []
    for a, b in zip(caches, solo, strict=True):
        a.flush_observations(), b.flush_observations()
        for x, y in zip(a.layers, b.layers, strict=True):
            assert torch.equal(x.positions, y.positions)
            for name, value in y.state.items():
                torch.testing.assert_close(x.state[name], value, atol=1e-5, rtol=1e-5)
    # an attention variant (a sliding window, soft-capping: what `plain` refuses) takes the padded batch
    monkeypatch.setattr(capture.decode, "plain", lambda kwargs: False)
    ids = [1, 2, 3]
    got = batched_decode(model, caches, ids)
    want = torch.cat([kvstore.forward(model, c, torch.tensor([[t]]))[:, -1] for c, t in zip(solo, ids, strict=True)])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert len(padded) == 2 * len(caches[0].layers)  # keys and values of every layer, once


def test_engine_option_is_checked_and_older_saves_take_the_default() -> None:
    with pytest.raises(KVStoreError, match="engine must be"):
        kvstore.make_cache(tiny_model(), "h2o", budget=256, engine="compiled-ish")
    data = CacheConfig.from_options("h2o", budget=256).to_dict()
    del data["engine"]  # saved before the option existed
    assert CacheConfig.from_saved(data).engine == "static"


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", "nexus-agent", "h2o"])
def test_smollm2_greedy_tokens_and_kept_positions_match(policy: str) -> None:
    from kvstore.models.registry import load_model

    model, _, _ = load_model(kvstore.DEFAULT_MODEL, device="cpu", dtype="fp32")
    ids = torch.randint(0, 49152, (1, 1024), generator=torch.Generator().manual_seed(0))
    runs = {}
    for engine in ("eager", "static"):
        cache = kvstore.make_cache(model, policy, budget=None if policy == "full" else 256, engine=engine)
        runs[engine] = (*_decode(model, cache, ids, 48), cache)
    assert runs["static"][0] == runs["eager"][0]
    torch.testing.assert_close(runs["static"][1], runs["eager"][1], atol=1e-4, rtol=0)
    for a, b in zip(runs["static"][2].layers, runs["eager"][2].layers, strict=True):
        assert torch.equal(a.positions, b.positions)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_decode_attention_matches_sdpa_on_buffer_views(dtype: torch.dtype, atol: float) -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from kvstore.attention.decode import applies, decode_attention

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    g = torch.Generator().manual_seed(0)
    query = torch.randn(2, 9, 1, 64, generator=g).to(dtype)
    buffers = torch.randn(2, 2, 3, 1100, 64, generator=g).to(dtype)  # keys/values buffers, 1000 of 1100 held
    key, value = buffers[0, :, :, :1000], buffers[1, :, :, :1000]
    assert applies(query, None)
    assert not applies(torch.zeros(1, 9, 2, 64), None)
    got, _ = decode_attention(module, query, key, value, None, scaling=0.125)
    ref, _ = sdpa_attention_forward(module, query, key, value, None, scaling=0.125)
    assert got.shape == ref.shape == (2, 1, 9, 64)
    torch.testing.assert_close(got.float(), ref.float(), atol=atol, rtol=0)
