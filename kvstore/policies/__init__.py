"""Eviction policies by name: the ones a user picks. One policy = one small file with its settings dataclass;
a variant is a registry entry with option defaults, not a new class.

Each policy's settings dataclass holds its paper's defaults (sources in its docstring), and its class the forced
set its paper keeps (`default_sink`, `default_recent`); an entry here may add variant options on top; user options
override both. Retired and experimental variants live outside the product (research/policies.py), registered
through `kvstore.register_policy` (kvstore.cache.config, which checks their options)."""

from __future__ import annotations

from typing import Any

from kvstore.errors import KVStoreError
from kvstore.policies.ada import AdaKV
from kvstore.policies.base import Policy, ScoreContext
from kvstore.policies.full import FullPolicy
from kvstore.policies.h2o import H2OPolicy
from kvstore.policies.morphkv import MorphKVPolicy
from kvstore.policies.nexus import NexusPolicy
from kvstore.policies.nexus_agent import NexusAgentPolicy
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
    "ada-snapkv": (AdaKV.around(SnapKVPolicy), {}),
    "nexus": (NexusPolicy, {}),
    # the product's default memory (docs/memory.md, measured with bench replay): per kv head and per token, the
    # accumulated attention each token received, its block's remembered per-head Nexus score and the attention it
    # received from the agent's own replies, plus 1 for every token the agent's replies wrote (own_weight) and 3
    # more for those of its latest reply (last_weight), 2 for the code names of a task a profile matched (name_weight),
    # 1 for every token of that task's text once a reply has been seen (task_text_weight),
    # top-K, half of the budget always on the most recent tokens, each message up to 4,096 tokens evicted once after
    # its last prefill chunk (prefill_slack);
    # without a memory profile the opening is ranked by attention alone until the first reply (opening_nexus=False)
    "nexus-agent": (
        NexusAgentPolicy,
        {
            "selector": "topk",
            "recent_share": 0.5,
            "score_memory": "mean",
            "opening_nexus": False,
            "own_weight": 1.0,
            "last_weight": 3.0,
            "name_weight": 2.0,
            "prefill_slack": 4096,
            "opening_recent_share": 0.25,
            "task_text_weight": 1.0,
        },
    ),
}


def policy_class(name: str) -> type[Policy]:
    return _lookup(name)[0]


def policy_defaults(name: str) -> dict[str, Any]:
    """The option defaults a policy name implies beyond its class's settings (user options override them)."""
    return dict(_lookup(name)[1])


def uses_profile(name: str) -> bool:
    """Whether this policy's score reads a memory profile (the others run the same with or without one)."""
    return _lookup(name)[0].uses_profile


def build_policy(config) -> Policy:
    """The policy of a cache config (kvstore.cache.config.CacheConfig), of the class the config resolved once."""
    return config.policy_type(config)


def _lookup(name: str) -> tuple[type[Policy], dict[str, Any]]:
    if name not in POLICIES:
        raise KVStoreError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}")
    return POLICIES[name]


__all__ = [
    "POLICIES",
    "Policy",
    "ScoreContext",
    "build_policy",
    "policy_class",
    "policy_defaults",
    "uses_profile",
]
