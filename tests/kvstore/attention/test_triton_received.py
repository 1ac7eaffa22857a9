"""The fused Triton kernel of the attention each held token receives (H2O's and the default memory's statistics)
equals the torch reference, run by triton's interpreter on the CPU."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

# the interpreter is chosen when the kernels are decorated, i.e. when the kernel modules are imported
os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton --no-deps, or the 'gpu' extra)")

from kvstore.attention.received import attention_received, per_kv_head  # noqa: E402


@pytest.fixture(scope="module")
def tr():
    """kvstore.attention.triton_received loaded in interpreter mode (reloaded, with the module it builds on, if
    something imported them compiled)."""
    for name in ("kvstore.attention.triton_scores", "kvstore.attention.triton_received"):
        mod = importlib.import_module(name)
        if not mod.INTERPRETED:
            mod = importlib.reload(sys.modules[name])
    assert mod.INTERPRETED, "triton did not switch to its interpreter"
    return mod


def reference(q, k, valid=None, weights=None, scale=None):
    return per_kv_head(attention_received(q, k, scale, valid, weights=weights), k.shape[0])


def _inputs(hq, hkv, rows, d, t, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(hq, rows, d, generator=g).to(dtype), (3 * torch.randn(hkv, t, d, generator=g)).to(dtype)


CASES = [  # hq, hkv, rows, d, t
    (4, 2, 16, 16, 64),  # one tile of keys
    (4, 2, 70, 16, 200),  # rows past one row tile, a partial key tile
    (8, 2, 100, 32, 100),  # every key is a new one (a first prefill chunk), GQA group 4
    (4, 4, 1, 16, 37),  # one decoded token, MHA
    (6, 3, 5, 16, 130),  # group 2 with 3 kv heads, rows not a power of two
    (16, 2, 3, 128, 150),  # group 8, head_dim 128 (Qwen3-32B's)
]


@pytest.mark.parametrize(("hq", "hkv", "rows", "d", "t"), CASES)
def test_matches_reference_fp32(tr, hq, hkv, rows, d, t):
    q, k = _inputs(hq, hkv, rows, d, t)
    got = tr.triton_received_attention(q, k)
    assert got.shape == (hkv, t)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, reference(q, k), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.sum(-1), torch.full((hkv,), float(rows)), atol=1e-3, rtol=0)  # rows sum to 1


def test_key_validity_weights_and_scale(tr):
    """Per-kv-head holes (a per-head cache's evicted slots) get nothing and the rest renormalize; weighted rows."""
    q, k = _inputs(8, 2, 40, 16, 180, seed=1)
    valid = torch.rand(2, 180, generator=torch.Generator().manual_seed(2)) > 0.3
    valid[:, -40:] = True  # the new tokens themselves are held
    weights = (torch.arange(40) % 3 == 0).float()
    got = tr.triton_received_attention(q, k, 0.2, valid, weights)
    torch.testing.assert_close(got, reference(q, k, valid, weights, 0.2), atol=1e-5, rtol=1e-4)
    assert float(got[~valid].abs().max()) == 0.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_reference_half(tr, dtype):
    q, k = _inputs(8, 2, 20, 64, 257, dtype, seed=3)
    torch.testing.assert_close(tr.triton_received_attention(q, k), reference(q, k), atol=1e-4, rtol=1e-3)


def test_strided_inputs(tr):
    """Keys viewed out of a larger preallocated buffer and transposed queries need no copy."""
    keys = torch.randn(1, 2, 200, 16)[0, :, :150]  # [Hkv, T, D], non-contiguous over T
    q = torch.randn(12, 4, 16).transpose(0, 1)  # [Hq=4, q=12, D], non-contiguous
    torch.testing.assert_close(tr.triton_received_attention(q, keys), reference(q, keys), atol=1e-5, rtol=1e-4)


def test_bad_shapes_are_refused(tr):
    with pytest.raises(ValueError, match="expected queries"):
        tr.triton_received_attention(torch.randn(3, 4, 16), torch.randn(2, 10, 16))
    with pytest.raises(ValueError, match="differ"):
        tr.triton_received_attention(torch.randn(4, 4, 16), torch.randn(2, 10, 16).double())


def _held(policy: str, use_triton: bool | None) -> list[torch.Tensor]:
    import kvstore
    from kvstore.models.tiny import tiny_model

    model = tiny_model("qwen3", impl="sdpa", vocab_size=300, max_positions=4096)
    cache = kvstore.make_cache(model, policy, 0.25, seed=3, use_triton=use_triton, block=16)
    cache.signals.reply_from = 400  # the last 300 tokens are the agent's reply (nexus-agent's reply term)
    ids = torch.randint(0, 300, (1, 700), generator=torch.Generator().manual_seed(1))
    kvstore.prefill(model, cache, ids, chunk_size=100)
    assert cache.stats()["eviction_steps"] > 0
    return [layer.positions[0].clone() for layer in cache.layers]


@pytest.mark.parametrize("policy", ["nexus-agent", "h2o", "snapkv"])
def test_caches_keep_the_same_tokens_through_the_kernel(tr, monkeypatch, policy):
    """H2O's and the default memory's statistics (every forward) and SnapKV's window score, run through the fused
    kernel, keep exactly the tokens the torch path keeps."""
    from kvstore.attention import dispatch

    monkeypatch.setenv("NEXUS_FORCE_TRITON", "1")
    assert dispatch.use_triton(torch.device("cpu"))
    fused = _held(policy, None)
    assert dispatch.triton_error() is None  # the kernel ran: it did not fall back to the torch path
    for a, b in zip(fused, _held(policy, False), strict=True):
        assert torch.equal(a, b)
