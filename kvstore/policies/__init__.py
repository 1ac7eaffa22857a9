"""Eviction policies by name. One policy = one small file; ablations and variants are configured entries.

Each policy class names its paper's defaults (`Policy.defaults`, `default_sink`, `default_recent`) with their
sources in its docstring; an entry here may add variant options on top; user options override both."""

from __future__ import annotations

from typing import Any

from kvstore.errors import KVStoreError
from kvstore.policies.ada import AdaSnapKVPolicy
from kvstore.policies.base import Policy, ScoreContext
from kvstore.policies.full import FullPolicy
from kvstore.policies.h2o import H2OPolicy
from kvstore.policies.morphkv import MorphKVPolicy
from kvstore.policies.nexus import NexusAccPolicy, NexusHeadPolicy, NexusPolicy
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
    "h2o-unnormalized": (H2OPolicy, {"h2o_normalize": False}),  # the H2O paper's raw accumulated attention
    "morphkv": (MorphKVPolicy, {}),
    "ada-snapkv": (AdaSnapKVPolicy, {}),
    "nexus": (NexusPolicy, {}),
    "nexus-topk": (NexusPolicy, {"selector": "topk"}),  # ablation: Nexus score, deterministic top-K
    "direct-reservoir": (NexusPolicy, {"lam": 0.0}),  # ablation: direct score only (lambda = 0), reservoir
    "nexus-head": (NexusHeadPolicy, {"selector": "topk"}),  # variant: the Nexus score per kv head, top-K
    # earlier default memories (docs/memory.md): the current window's Nexus score only, top-K, half of the budget
    # recent; then each block's Nexus score averaged over every eviction step it was held in
    "nexus-agent-window": (NexusPolicy, {"selector": "topk", "recent_share": 0.5}),
    "nexus-agent-mean": (NexusPolicy, {"selector": "topk", "recent_share": 0.5, "score_memory": "mean"}),
    # the product's default memory (docs/memory.md, measured with bench replay): per kv head and per token, the
    # accumulated attention each token received, its block's remembered per-head Nexus score and the attention it
    # received from the agent's own replies, plus 1 for every token the agent's replies wrote (own_weight), top-K,
    # half of the budget always on the most recent tokens; without a memory profile the opening is ranked by
    # attention alone until the first reply (opening_nexus=False)
    "nexus-agent": (
        NexusAccPolicy,
        {"selector": "topk", "recent_share": 0.5, "score_memory": "mean", "opening_nexus": False, "own_weight": 1.0},
    ),
    # the default until the bonus for the agent's own tokens came (the three attention terms only)
    "nexus-agent-reply": (
        NexusAccPolicy,
        {"selector": "topk", "recent_share": 0.5, "score_memory": "mean", "opening_nexus": False},
    ),
    # the default until the reply term came (the first two terms only)
    "nexus-agent-acc": (
        NexusAccPolicy,
        {"selector": "topk", "recent_share": 0.5, "score_memory": "mean", "reply_weight": 0.0},
    ),
}


def policy_defaults(name: str) -> dict[str, Any]:
    """The option defaults a policy name implies: its class's paper defaults, then the entry's variant options
    (user options override them)."""
    cls, variant = _lookup(name)
    return dict(cls.defaults) | dict(variant)


def is_stochastic(name: str, **options: Any) -> bool:
    """Whether this policy (with these options) selects by random draws, so a result depends on the seed."""
    cls, implied = _lookup(name)
    selector = (implied | options).get("selector") or cls.default_selector
    return cls.evicts and selector == "reservoir"


def uses_profile(name: str) -> bool:
    """Whether this policy's score reads a memory profile (the others run the same with or without one)."""
    return _lookup(name)[0].uses_profile


def build_policy(config) -> Policy:
    return _lookup(config.policy)[0](config)


def _lookup(name: str) -> tuple[type[Policy], dict[str, Any]]:
    if name not in POLICIES:
        raise KVStoreError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}")
    return POLICIES[name]


__all__ = ["POLICIES", "Policy", "ScoreContext", "build_policy", "is_stochastic", "policy_defaults", "uses_profile"]
