"""The fused Triton window-scoring kernel equals the torch reference, run by triton's interpreter on the CPU."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

# the interpreter is chosen when the kernels are decorated, i.e. when kvstore.attention.triton_scores is imported
os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton --no-deps, or the 'gpu' extra)")

from kvstore.attention import dispatch  # noqa: E402
from kvstore.attention.scoring import kv_head_block_scores, window_block_scores  # noqa: E402


@pytest.fixture(scope="module")
def ts():
    """kvstore.attention.triton_scores loaded in interpreter mode (reloaded if something imported it compiled)."""
    mod = importlib.import_module("kvstore.attention.triton_scores")
    if not mod.INTERPRETED:
        mod = importlib.reload(sys.modules["kvstore.attention.triton_scores"])
    assert mod.INTERPRETED, "triton did not switch to its interpreter"
    return mod


def _inputs(hq, hkv, w, d, t, dtype, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(hq, w, d, generator=g).to(dtype)
    k = (spread * torch.randn(hkv, t, d, generator=g)).to(dtype)
    return q, k


CASES = [  # hq, hkv, w, d, t, block
    (4, 2, 16, 16, 64, 32),  # whole blocks
    (4, 2, 16, 16, 100, 32),  # partial last block
    (4, 2, 16, 16, 16, 32),  # T == W: a single partial block
    (8, 2, 16, 64, 300, 16),  # GQA group 4, several tiles
    (4, 4, 5, 16, 37, 64),  # MHA, W not a power of two
    (6, 3, 16, 16, 130, 128),  # group 2 with 3 kv heads
    (2, 1, 70, 16, 200, 32),  # W > 64: scored in row chunks
    (16, 2, 16, 16, 100, 32),  # group 8: two row stacks per kv head
    (32, 8, 16, 128, 200, 32),  # Qwen3-8B heads and head_dim
]


@pytest.mark.parametrize(("hq", "hkv", "w", "d", "t", "block"), CASES)
def test_matches_reference_fp32(ts, hq, hkv, w, d, t, block):
    q, k = _inputs(hq, hkv, w, d, t, torch.float32, spread=3.0)
    got = ts.triton_window_block_scores(q, k, block)
    ref = window_block_scores(q, k, block)
    assert got.shape == ref.shape == (w, -(-t // block))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.sum(-1), torch.ones(w), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("t", "block"), [(90, 16), (257, 32)])
def test_matches_reference_half(ts, dtype, t, block):
    q, k = _inputs(8, 2, 16, 64, t, dtype, seed=1, spread=2.0)
    got = ts.triton_window_block_scores(q, k, block)
    torch.testing.assert_close(got, window_block_scores(q, k, block), atol=1e-4, rtol=1e-3)
    per_kv = ts.triton_window_block_scores(q, k, block, per_kv=True)
    torch.testing.assert_close(per_kv, kv_head_block_scores(q, k, block), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(("hq", "hkv", "w", "d", "t", "block"), CASES)
def test_per_kv_head_matches_reference_fp32(ts, hq, hkv, w, d, t, block):
    """One output per kv head, its group of query heads averaged (the default memory's Nexus term)."""
    q, k = _inputs(hq, hkv, w, d, t, torch.float32, spread=3.0)
    got = ts.triton_window_block_scores(q, k, block, per_kv=True)
    ref = kv_head_block_scores(q, k, block)
    assert got.shape == ref.shape == (hkv, w, -(-t // block))
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.sum(-1), torch.ones(hkv, w), atol=1e-5, rtol=0)


def test_strided_inputs_and_scale(ts):
    """Keys viewed out of a larger preallocated buffer and a transposed query buffer need no copy."""
    buf = torch.randn(1, 2, 200, 16)
    keys = buf[0, :, :150]  # [Hkv, T, D], non-contiguous over T
    q = torch.randn(16, 4, 16).transpose(0, 1)  # [Hq=4, W=16, D], non-contiguous
    got = ts.triton_window_block_scores(q, keys, 32, scale=0.3)
    torch.testing.assert_close(got, window_block_scores(q, keys, 32, scale=0.3), atol=1e-6, rtol=1e-5)


def test_window_longer_than_keys(ts):
    """With T < W the first W - T rows see no key: 0 here (NaN in the torch reference); the rest match."""
    q, k = _inputs(4, 2, 16, 16, 10, torch.float32)
    got = ts.triton_window_block_scores(q, k, 16)
    ref = window_block_scores(q, k, 16)
    assert torch.equal(got[:6], torch.zeros(6, 1))
    torch.testing.assert_close(got[6:], ref[6:])


def test_bad_shapes_raise(ts):
    q, k = _inputs(3, 2, 16, 16, 40, torch.float32)
    with pytest.raises(ValueError, match="incompatible heads"):
        ts.triton_window_block_scores(q, k, 32)
    q, k = _inputs(4, 2, 16, 16, 40, torch.float32)
    with pytest.raises(ValueError, match="power of two"):
        ts.triton_window_block_scores(q, k, 24)


def test_dispatch(ts, monkeypatch):
    """The fused scores run under NEXUS_FORCE_TRITON=1 and TRITON_INTERPRET=1 only (None: the caller takes the torch
    path), and are the kernel's."""
    q, k = _inputs(4, 2, 16, 16, 100, torch.float32)
    monkeypatch.delenv("NEXUS_FORCE_TRITON", raising=False)
    assert not dispatch.use_triton(k.device)
    assert dispatch.fused_window_block_scores(q, k, 32) is None
    assert dispatch.fused_kv_head_block_scores(q, k, 32) is None
    monkeypatch.setenv("NEXUS_FORCE_TRITON", "1")
    assert dispatch.use_triton(k.device)
    assert torch.equal(dispatch.fused_window_block_scores(q, k, 32), ts.triton_window_block_scores(q, k, 32))
    fused = ts.triton_window_block_scores(q, k, 32, per_kv=True)
    assert torch.equal(dispatch.fused_kv_head_block_scores(q, k, 32), fused)


FALLBACK = """
import os, warnings
import torch
import kvstore.attention.triton_scores as ts  # compiled mode, and this machine has no GPU driver
from kvstore.attention import dispatch
assert not ts.INTERPRETED
os.environ.update(TRITON_INTERPRET="1", NEXUS_FORCE_TRITON="1")  # too late for the kernels: they stay compiled
q, k = torch.randn(4, 16, 16), torch.randn(2, 100, 16)
assert dispatch.use_triton(k.device)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert dispatch.fused_window_block_scores(q, k, 32) is None  # the caller's torch path
assert dispatch.triton_error() and not dispatch.use_triton(k.device)
assert any("a Triton kernel failed" in str(w.message) for w in caught)
assert dispatch.fused_received_attention(torch.randn(4, 32, 16), k, None, None) is None  # every kernel: the torch path
"""


@pytest.mark.slow
def test_dispatch_falls_back_to_torch_when_the_kernel_cannot_launch():
    """A triton that cannot compile or launch (here: compiled mode on a machine without a GPU driver) leaves the
    cache on the torch path with one warning, and says why."""
    import subprocess
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("the kernel launches on this machine")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NEXUS_FORCE_TRITON")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    proc = subprocess.run([sys.executable, "-c", FALLBACK], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# the per-kv-head Nexus score alone (nexus-agent's other terms off): its kernel path is the per-head one
PER_HEAD = {"acc_weight": 0.0, "reply_weight": 0.0, "own_weight": 0.0, "opening_nexus": True}


def _held_positions(use_triton: bool | None, policy: str = "nexus") -> list[torch.Tensor]:
    import kvstore
    from kvstore.models.tiny import tiny_model

    model = tiny_model("qwen3", impl="sdpa", vocab_size=300, max_positions=4096)
    options = PER_HEAD if policy == "nexus-agent" else {}
    cache = kvstore.make_cache(model, policy, 0.25, seed=3, use_triton=use_triton, **options)
    ids = torch.randint(0, 300, (1, 700), generator=torch.Generator().manual_seed(1))
    kvstore.prefill(model, cache, ids, chunk_size=128)
    assert cache.stats()["eviction_steps"] > 0
    return [layer.positions[0].clone() for layer in cache.layers]  # [Hkv, held]: per-head policies differ by head


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["nexus", "nexus-agent"])
def test_cache_evicts_the_same_blocks_through_the_kernel(ts, monkeypatch, policy):
    """The nexus cache (one score per layer) and the per-kv-head one run through the fused kernel keep exactly the
    tokens the torch path keeps, and the kernel did run."""
    monkeypatch.setenv("NEXUS_FORCE_TRITON", "1")
    assert dispatch.use_triton(torch.device("cpu"))
    calls = []
    kernel = ts.triton_window_block_scores
    monkeypatch.setattr(ts, "triton_window_block_scores", lambda *a: calls.append(a[4:]) or kernel(*a))
    fused = _held_positions(None, policy)
    assert calls and all(per_kv == (policy == "nexus-agent",) for per_kv in calls)
    n = len(calls)
    reference = _held_positions(False, policy)
    assert len(calls) == n  # use_triton=False: the torch path only
    for a, b in zip(fused, reference, strict=True):
        assert torch.equal(a, b)


AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import kvstore.attention.triton_received as tr
import kvstore.attention.triton_scores as ts

assert not ts.INTERPRETED and not tr.INTERPRETED
def build(fn, dtype, const, floats, warps):
    names = fn.arg_names
    sig = {}
    for n in names:
        if n in const:
            sig[n] = "constexpr"
        elif n.endswith("_ptr"):
            sig[n] = "*" + dtype if n in ("q_ptr", "k_ptr") else "*u8" if n == "valid_ptr" else "*fp32"
        else:
            sig[n] = "fp32" if n in floats else "i32"
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
for dtype, ieee in (("bf16", False), ("fp32", True)):
    shape = dict(D=128, DP=128, WP=16, GB=4, IEEE=ieee, UPCAST=False)
    k1 = build(ts._lse_kernel, dtype, dict(shape, TILE=ts.LSE_TILE), {"scale"}, ts._warps(128, 64, ts.LSE_TILE))
    k2 = build(ts._block_kernel, dtype, dict(shape, BLOCK=32, TILE=64), {"scale", "inv_heads"}, ts._warps(128, 64, 64))
    assert "cubin" in k1.asm and "cubin" in k2.asm
    for valid, weights in ((False, False), (True, True)):  # the received-attention kernels, Qwen3-32B shapes
        shape = dict(D=128, DP=128, ROWS=tr.ROWS, TILE=tr.TILE, HAS_VALID=valid, IEEE=ieee, UPCAST=False)
        warps = ts._warps(128, tr.ROWS, tr.TILE)
        k3 = build(tr._lse_kernel, dtype, shape, {"scale"}, warps)
        k4 = build(tr._column_kernel, dtype, dict(shape, HAS_WEIGHTS=weights), {"scale", "inv_group"}, warps)
        assert "cubin" in k3.asm and "cubin" in k4.asm
"""


@pytest.mark.slow
def test_kernels_compile_for_h200_without_a_gpu():
    """The compiled path (not the interpreter) type-checks and lowers to an sm_90 cubin: the scoring kernels at
    Qwen3-8B shapes, the received-attention kernels at Qwen3-32B's head_dim."""
    import subprocess
    from pathlib import Path

    from triton.backends.compiler import GPUTarget  # noqa: F401  (the API the check uses)

    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NEXUS_FORCE_TRITON")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    proc = subprocess.run([sys.executable, "-c", AOT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
