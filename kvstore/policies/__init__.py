"""Eviction policies by name. One policy = one small file; ablations are configured variants."""

from __future__ import annotations

from typing import Any

from kvstore.errors import KVStoreError
from kvstore.policies.ada import AdaSnapKVPolicy
from kvstore.policies.base import Policy, ScoreContext
from kvstore.policies.full import FullPolicy
from kvstore.policies.h2o import H2OPolicy
from kvstore.policies.morphkv import MorphKVPolicy
from kvstore.policies.nexus import NexusPolicy
from kvstore.policies.pyramidkv import PyramidKVPolicy
from kvstore.policies.snapkv import SnapKVPolicy
from kvstore.policies.streaming import StreamingPolicy

# name -> (policy class, option defaults that name implies)
POLICIES: dict[str, tuple[type[Policy], dict[str, Any]]] = {
    "full": (FullPolicy, {}),
    "streaming": (StreamingPolicy, {}),
    "snapkv": (SnapKVPolicy, {}),
    "pyramidkv": (PyramidKVPolicy, {}),
    "h2o": (H2OPolicy, {}),
    "morphkv": (MorphKVPolicy, {}),
    "ada-snapkv": (AdaSnapKVPolicy, {}),
    "nexus": (NexusPolicy, {}),
    "nexus-topk": (NexusPolicy, {"selector": "topk"}),  # ablation: Nexus score, deterministic top-K
    "direct-reservoir": (NexusPolicy, {"lam": 0.0}),  # ablation: direct score only (lambda = 0), reservoir
}


def policy_defaults(name: str) -> dict[str, Any]:
    """The option defaults a policy name implies (user options override them)."""
    return dict(_lookup(name)[1])


def is_stochastic(name: str, **options: Any) -> bool:
    """Whether this policy (with these options) selects by random draws, so a result depends on the seed."""
    cls, implied = _lookup(name)
    selector = (implied | options).get("selector") or cls.default_selector
    return cls.evicts and selector == "reservoir"


def build_policy(config) -> Policy:
    return _lookup(config.policy)[0](config)


def _lookup(name: str) -> tuple[type[Policy], dict[str, Any]]:
    if name not in POLICIES:
        raise KVStoreError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}")
    return POLICIES[name]


__all__ = ["POLICIES", "Policy", "ScoreContext", "build_policy", "is_stochastic", "policy_defaults"]
