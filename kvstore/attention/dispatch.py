"""Where the attention maths runs: the fused Triton kernels on a GPU, else the torch references beside them.

One pattern: `fused_<what>` runs the kernel `triton_<what>` of a `triton_*` module here when the Triton path runs for
the tensors' device (`use_triton`: CUDA with triton importable, or the CPU when NEXUS_FORCE_TRITON=1 and
TRITON_INTERPRET=1, for tests) and returns None otherwise, when the caller takes its torch path:
- `fused_window_block_scores`, `fused_kv_head_block_scores`: Nexus's S-hat (kvstore.attention.scoring), per layer
  or per kv head;
- `fused_received_attention`: the attention held tokens receive (H2O's and the default memory's statistics, SnapKV's
  window score; kvstore.attention.received);
- `fused_decode_attention`: one decoded query's attention output and the mass each held key receives, in one pass
  over the keys (kvstore.attention.decode), for the cache's attention wrapper.
Triton is optional (extra `gpu`): nothing here imports it until a kernel runs. A kernel that fails to compile or run
sends every later call of this process to the torch paths, with one warning.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from functools import cache

import torch

from kvstore.attention.decode import decode_attention_with_mass

__all__ = [
    "fused_decode_attention",
    "fused_kv_head_block_scores",
    "fused_received_attention",
    "fused_window_block_scores",
    "triton_available",
    "triton_error",
    "use_triton",
]

# The received-attention kernel parallelizes its first pass over query rows, not keys: for a decoded token (one row)
# it streamed 32K held keys in 64 programs and took 2.4x the torch path's time per token on an H200 (Qwen3-32B shape,
# docs/benchmarks.md "On a GPU"; at 8K it took 0.7x). Fewer rows than this take the torch path.
MIN_FUSED_ROWS = 16
_failure: list[str] = []  # the first error of the Triton path in this process; the torch path is used from then on
_verified: set[tuple[torch.device, torch.dtype]] = set()  # where the fused decode kernel matched the torch path


def triton_error() -> str | None:
    """Why the Triton path was given up in this process (it failed to compile or run), else None."""
    return _failure[0] if _failure else None


@cache
def triton_available() -> bool:
    """True when the triton package can be imported."""
    return importlib.util.find_spec("triton") is not None


def use_triton(device: torch.device) -> bool:
    """Whether the Triton path runs for tensors on `device`."""
    if not triton_available() or _failure:
        return False
    if device.type == "cuda":
        return True
    return os.environ.get("NEXUS_FORCE_TRITON") == "1" and os.environ.get("TRITON_INTERPRET") == "1"


def _run(module: str, kernel: str, keys: torch.Tensor, *args):
    """kernel(*args) of `kvstore.attention.<module>` (imported here, on first use) when the Triton path runs for
    `keys`' device; None when it does not or fails (the caller takes its torch path). `args` hold `keys`."""
    if not use_triton(keys.device):
        return None
    try:
        return getattr(importlib.import_module(f"kvstore.attention.{module}"), kernel)(*args)
    except ValueError:
        raise  # bad shapes: the caller's bug, the same on either path
    except Exception as exc:  # a triton that cannot compile or launch here: keep the cache working
        _failure.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        warnings.warn(f"a Triton kernel failed, using the torch paths from now on: {_failure[0]}", stacklevel=3)
    return None


def fused_window_block_scores(
    q_win: torch.Tensor, keys: torch.Tensor, block: int, scale: float | None = None
) -> torch.Tensor | None:
    """S-hat [W, N_k] of window queries [Hq, W, D] over held keys [Hkv, T, D]
    (`kvstore.attention.scoring.window_block_scores`), when the Triton path runs; None: take the torch path."""
    return _run("triton_scores", "triton_window_block_scores", keys, q_win, keys, block, scale, False)


def fused_kv_head_block_scores(
    q_win: torch.Tensor, keys: torch.Tensor, block: int, scale: float | None = None
) -> torch.Tensor | None:
    """S-hat per kv head [Hkv, W, N_k] (`kvstore.attention.scoring.kv_head_block_scores`, whose [Hq, W, T] fp32
    probabilities the kernel never writes), when the Triton path runs; None: take the torch path."""
    return _run("triton_scores", "triton_window_block_scores", keys, q_win, keys, block, scale, True)


def fused_received_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    scale: float | None,
    key_valid: torch.Tensor | None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The attention each held key receives from `queries`, summed over them and averaged over each kv head's query
    heads, [Hkv, T] (`kvstore.attention.triton_received`), when the Triton path runs; None: take the torch path (also
    for queries of another dtype than the keys, which the torch path upcasts together, and for fewer than
    MIN_FUSED_ROWS queries: a decoded token)."""
    if queries.dtype != keys.dtype or queries.shape[-2] < MIN_FUSED_ROWS:
        return None
    return _run("triton_received", "triton_received_attention", keys, queries, keys, scale, key_valid, weights)


def fused_decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float | None = None,
    key_valid: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Attention output [B, 1, Hq, D] of one decoded query per sequence (query [B, Hq, 1, D], key/value
    [B, Hkv, T, D]) and the mass each held key receives [B, Hkv, T] fp32, fused (`kvstore.attention.triton_decode`),
    when the Triton path runs; None: take the torch path (`kvstore.attention.decode.decode_attention_with_mass`),
    also for more than one query or mixed dtypes."""
    if query.dim() != 4 or query.shape[-2] != 1 or not (query.dtype == key.dtype == value.dtype):
        return None
    got = _run("triton_decode", "triton_decode_attention", key, query, key, value, scale, key_valid, lengths)
    if got is None or (query.device, query.dtype) in _verified:
        return got
    return _checked(got, query, key, value, scale, key_valid, lengths)


def _checked(got: tuple[torch.Tensor, torch.Tensor], query, key, value, scale, key_valid, lengths):
    """`got`, the fused decode kernel's first result for this device and dtype, if it agrees with the torch path
    on the same inputs; else None, and every later call of this process takes the torch paths, with one warning.
    The kernel is tested under triton's interpreter; this guards a GPU's compiled code, which replaces the model's
    own attention in decode."""
    out, mass = decode_attention_with_mass(query, key, value, scale, key_valid, lengths)
    tol = (1e-3, 1e-4) if query.dtype == torch.float32 else (1e-1, 1e-2)  # bf16: the torch path rounds its logits
    out_err = float((got[0].float() - out.float()).abs().max())
    mass_err = float((got[1].float() - mass.float()).abs().max())
    if out_err <= tol[0] and mass_err <= tol[1]:
        _verified.add((query.device, query.dtype))
        return got
    _failure.append(
        f"the fused decode kernel disagreed with the torch path (output {out_err:.3g}, mass {mass_err:.3g})"
    )
    warnings.warn(f"a Triton kernel failed, using the torch paths from now on: {_failure[0]}", stacklevel=3)
    return None
