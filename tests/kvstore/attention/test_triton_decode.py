"""The fused Triton decode-attention kernel (one decoded query per sequence: the attention output and the mass each
held key receives, in one pass over the keys) equals the torch path, run by triton's interpreter on the CPU."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

# the interpreter is chosen when the kernels are decorated, i.e. when the kernel modules are imported
os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton --no-deps, or the 'gpu' extra)")

from kvstore.attention.decode import decode_attention, decode_attention_with_mass  # noqa: E402
from kvstore.attention.received import attention_received, per_kv_head  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def td():
    """kvstore.attention.triton_decode loaded in interpreter mode (reloaded if something imported it compiled)."""
    mod = importlib.import_module("kvstore.attention.triton_decode")
    if not mod.INTERPRETED:
        mod = importlib.reload(sys.modules["kvstore.attention.triton_decode"])
    assert mod.INTERPRETED, "triton did not switch to its interpreter"
    return mod


def _inputs(b, hq, hkv, d, t, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, 1, d, generator=g)
    k = 2 * torch.randn(b, hkv, t, d, generator=g)  # peaked enough that a few keys dominate
    v = torch.randn(b, hkv, t, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _close(got, ref, atol, rtol=0.0):
    (out, mass), (ref_out, ref_mass) = got, ref
    assert out.shape == ref_out.shape
    assert out.dtype == ref_out.dtype
    assert mass.shape == ref_mass.shape
    assert mass.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref_out.float(), atol=atol[0], rtol=rtol)
    torch.testing.assert_close(mass, ref_mass, atol=atol[1], rtol=rtol)


@pytest.mark.parametrize("t", [1, 63, 64, 65, 1000])
@pytest.mark.parametrize("group", [1, 3, 4])
def test_matches_reference_fp32(td, t, group):
    q, k, v = _inputs(2, 2 * group, 2, 64, t, seed=t + group)
    got = td.triton_decode_attention(q, k, v)
    _close(got, decode_attention_with_mass(q, k, v), atol=(2e-6, 1e-6), rtol=1e-5)
    torch.testing.assert_close(got[1].sum(-1), torch.ones(2, 2), atol=1e-5, rtol=0)  # each kv head's mass sums to 1
    # the mass is the policies' statistic: per_kv_head(attention_received) of the one query
    received = per_kv_head(attention_received(q[1], k[1]), 2)  # sequence 1: queries [Hq, 1, D]
    torch.testing.assert_close(got[1][1], received, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(("hq", "hkv", "d", "t", "splits"), [(8, 2, 64, 1000, 3), (16, 2, 128, 300, None)])
def test_splits_and_head_dim_128(td, hq, hkv, d, t, splits):
    """Splits of several tiles (uneven: 6, 6, 4 tiles), and group 8 at head_dim 128 (Qwen3-32B's heads)."""
    q, k, v = _inputs(2, hq, hkv, d, t, seed=5)
    got = td.triton_decode_attention(q, k, v, num_splits=splits)
    _close(got, decode_attention_with_mass(q, k, v), atol=(2e-6, 1e-6), rtol=1e-5)


def test_plain_output_is_decode_attentions(td):
    """Without a mask the torch reference's output is `decode_attention`'s, exactly."""
    q, k, v = _inputs(2, 6, 2, 64, 70, torch.bfloat16)
    assert torch.equal(decode_attention_with_mass(q, k, v, 0.3)[0], decode_attention(None, q, k, v, scaling=0.3)[0])


BF16, FP16 = torch.bfloat16, torch.float16


@pytest.mark.parametrize(("t", "group", "dtype"), [(1, 1, BF16), (65, 3, BF16), (1000, 4, BF16), (65, 3, FP16)])
def test_matches_reference_half(td, t, group, dtype):
    """bf16 / fp16 in: near the torch path (which rounds the logits and probabilities to the inputs' dtype), nearer
    still to fp32 math on the same inputs (the kernel accumulates in fp32)."""
    q, k, v = _inputs(2, 2 * group, 2, 64, t, dtype, seed=t)
    got = td.triton_decode_attention(q, k, v)
    _close(got, decode_attention_with_mass(q, k, v), atol=(2e-2, 2e-2), rtol=2e-2)
    exact_out, exact_mass = decode_attention_with_mass(q.float(), k.float(), v.float())
    _close(got, (exact_out.to(dtype), exact_mass), atol=(1e-2, 1e-5), rtol=1e-2)


def test_key_validity_lengths_and_strides(td):
    """Keys, values and the head mask viewed out of larger preallocated buffers (kvstore.cache.buffers), a transposed
    query, per-kv-head holes holding NaN (what an unheld slot may hold), per-sequence lengths, and one kv head of one
    sequence that holds nothing (output 0, mass 0)."""
    b, hq, hkv, d, t, cap = 2, 6, 2, 64, 150, 192
    g = torch.Generator().manual_seed(7)
    k_buf = 2 * torch.randn(b, hkv, cap, d, generator=g)
    v_buf = torch.randn(b, hkv, cap, d, generator=g)
    valid_buf = torch.rand(b, hkv, cap, generator=g) > 0.3
    valid_buf[1, 0] = False
    q = torch.randn(b, 1, hq, d, generator=g).transpose(1, 2)  # [B, Hq, 1, D], not contiguous
    k, v, valid = k_buf[:, :, :t], v_buf[:, :, :t], valid_buf[:, :, :t]
    assert not (k.is_contiguous() or valid.is_contiguous())
    lengths = torch.tensor([t, 101])
    ref = decode_attention_with_mass(q, k, v, 0.2, valid, lengths)
    k_buf[:, :, :t][~valid] = float("nan")
    v_buf[:, :, :t][~valid] = float("nan")
    k_buf[1, :, 101:] = v_buf[1, :, 101:] = float("nan")
    got = td.triton_decode_attention(q, k, v, 0.2, valid, lengths, num_splits=2)
    _close(got, ref, atol=(2e-6, 1e-6), rtol=1e-5)
    assert float(got[1][~valid].abs().max()) == 0.0
    assert float(got[1][1, :, 101:].abs().max()) == 0.0
    assert float(got[0][1, 0, :3].abs().max()) == 0.0  # kv head 0 of sequence 1 (query heads 0-2) holds nothing
    torch.testing.assert_close(got[1].sum(-1), torch.tensor([[1.0, 1.0], [0.0, 1.0]]), atol=1e-5, rtol=0)


def test_bad_shapes_are_refused(td):
    q, k, v = _inputs(1, 4, 2, 16, 10)
    with pytest.raises(ValueError, match="expected query"):
        td.triton_decode_attention(q.expand(1, 4, 2, 16), k, v)
    with pytest.raises(ValueError, match="incompatible"):
        td.triton_decode_attention(q[:, :3], k, v)
    with pytest.raises(ValueError, match="differ"):
        td.triton_decode_attention(q, k, v.double())


def test_dispatch(td, monkeypatch):
    """The Triton path runs under NEXUS_FORCE_TRITON=1 and TRITON_INTERPRET=1 only (None: the caller takes the torch
    path), and never for more than one query."""
    from kvstore.attention import dispatch

    q, k, v = _inputs(2, 4, 2, 64, 40)
    monkeypatch.delenv("NEXUS_FORCE_TRITON", raising=False)
    assert dispatch.fused_decode_attention(q, k, v) is None
    monkeypatch.setenv("NEXUS_FORCE_TRITON", "1")
    got = dispatch.fused_decode_attention(q, k, v, 0.1)
    assert got is not None
    assert dispatch.triton_error() is None
    _close(got, decode_attention_with_mass(q, k, v, 0.1), atol=(2e-6, 1e-6), rtol=1e-5)
    assert dispatch.fused_decode_attention(q.expand(2, 4, 3, 64), k, v) is None
    assert dispatch.fused_decode_attention(q.double(), k, v) is None


def test_a_kernel_that_disagrees_on_its_first_call_is_given_up(td, monkeypatch):
    """A compiled kernel that runs but gives other numbers than the torch path (the first call per device and dtype
    is compared) sends the caller to the torch path from then on, with one warning."""
    from kvstore.attention import dispatch

    monkeypatch.setenv("NEXUS_FORCE_TRITON", "1")
    monkeypatch.setattr(dispatch, "_failure", [])
    monkeypatch.setattr(dispatch, "_verified", set())
    q, k, v = _inputs(1, 4, 2, 64, 30)
    real = td.triton_decode_attention
    monkeypatch.setattr(td, "triton_decode_attention", lambda *a: (lambda o, m: (o + 1.0, m))(*real(*a)))
    with pytest.warns(UserWarning, match="disagreed with the torch path"):
        assert dispatch.fused_decode_attention(q, k, v) is None
    assert "disagreed" in dispatch.triton_error()
    assert dispatch.fused_decode_attention(q, k, v) is None  # no second try: the torch paths from now on
    monkeypatch.setattr(dispatch, "_failure", [])
    monkeypatch.setattr(td, "triton_decode_attention", real)
    assert dispatch.fused_decode_attention(q, k, v) is not None
    assert dispatch._verified  # a kernel that agrees
