"""GPU-only checks of the compiled decode-attention kernel (kvstore.attention.triton_decode) against fp32 torch math on
the same inputs: Qwen3 shapes, bf16 and fp32, head masks and lengths on views of preallocated buffers."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

CASES = [  # b, hq, hkv, d, t
    (1, 32, 8, 128, 8192),  # Qwen3-8B
    (2, 64, 8, 128, 5001),  # Qwen3-32B (group 8), a partial tile
    (4, 9, 3, 64, 777),  # group 3, head_dim 64
    (3, 4, 4, 64, 1),  # one held key, MHA
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("b", "hq", "hkv", "d", "t"), CASES)
def test_kernel_matches_reference(dtype, b, hq, hkv, d, t):
    from kvstore.attention.decode import decode_attention_with_mass
    from kvstore.attention.triton_decode import INTERPRETED, triton_decode_attention

    assert not INTERPRETED, "unset TRITON_INTERPRET to test the compiled kernel"
    g = torch.Generator(device="cuda").manual_seed(0)
    cap = t + 100
    k_buf = (2 * torch.randn(b, hkv, cap, d, device="cuda", generator=g)).to(dtype)
    v_buf = torch.randn(b, hkv, cap, d, device="cuda", generator=g).to(dtype)
    valid_buf = torch.rand(b, hkv, cap, device="cuda", generator=g) > 0.2
    valid_buf[:, :, 0] = True
    q = torch.randn(b, 1, hq, d, device="cuda", generator=g).to(dtype).transpose(1, 2)
    k, v, valid = k_buf[:, :, :t], v_buf[:, :, :t], valid_buf[:, :, :t]
    lengths = torch.tensor([max(1, t - 7 * i) for i in range(b)], device="cuda")
    for kv_mask, lens in ((None, None), (valid, lengths)):
        out, mass = triton_decode_attention(q, k, v, None, kv_mask, lens)
        ref_out, ref_mass = decode_attention_with_mass(q.float(), k.float(), v.float(), None, kv_mask, lens)
        assert out.is_cuda
        assert out.dtype == dtype
        assert mass.dtype == torch.float32
        tol = dict(atol=3e-2, rtol=1e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out.float(), ref_out, **tol)
        torch.testing.assert_close(mass, ref_mass, atol=1e-5, rtol=1e-3)
