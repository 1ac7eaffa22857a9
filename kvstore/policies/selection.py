"""Selection: which K candidates survive an eviction step (docs/algorithm.md, "Selection").

Based on "Nexus Sampling", section 2.3 (Eq. 6): the n-averaged weighted reservoir priority
pi_j = (1/n) sum_i u_ij^(1/w_j), computed in log space; keep the K largest. n = 1 is Efraimidis-Spirakis A-Res
(weighted sampling without replacement); n -> inf tends to deterministic top-K by w.
"""

from __future__ import annotations

import math

import torch


def log_reservoir_priority(weights: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """log pi_j = logsumexp_i(log(u_ij) / w_j) - log(n), in float64 on the generator's device.

    Parameters
    ----------
    weights : [..., N] non-negative weights (a zero weight gets priority -inf: never chosen before a positive one).
    n : uniforms averaged per candidate.
    generator : the cache's seeded generator (its device decides where the uniforms are drawn).

    Returns
    -------
    [..., N] float64 log-priorities (no underflow even for weights ~1e-4 where u ** (1/w) is 0 in float64).
    """
    w = weights.to(device=generator.device, dtype=torch.float64)
    u = torch.rand((n, *w.shape), generator=generator, dtype=torch.float64, device=generator.device)
    u = u.clamp_min(torch.finfo(torch.float64).tiny)  # log(0) guard; rand is in [0, 1)
    return torch.logsumexp(torch.log(u) / w, dim=0) - math.log(n)


def select(weights: torch.Tensor, k: int, selector: str, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """Indices (sorted ascending) of the k kept candidates along the last dim: [..., N] -> [..., k]."""
    k = min(k, weights.shape[-1])
    if k <= 0:
        return torch.empty((*weights.shape[:-1], 0), dtype=torch.long, device=weights.device)
    if selector == "topk":
        keys = weights.float()
    elif selector == "reservoir":
        keys = log_reservoir_priority(weights, n, generator)
    else:
        raise ValueError(f"unknown selector {selector!r}")
    idx = torch.topk(keys, k, dim=-1).indices
    return idx.sort(dim=-1).values.to(weights.device)
