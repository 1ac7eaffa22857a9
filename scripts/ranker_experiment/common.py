"""Registers the experiment's policies (nexus-agent-ranked, nexus-agent-rec) and gives every cache's policy a
reference to its cache (the role features read the reply spans). Imported first by the drivers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rankpol import RankedPolicy, RecordingPolicy

import kvstore.cache as kc
import kvstore.policies as P

VARIANT = {"selector": "topk", "recent_share": 0.5, "score_memory": "mean", "opening_nexus": False}
P.POLICIES["nexus-agent-ranked"] = (RankedPolicy, dict(VARIANT))
P.POLICIES["nexus-agent-rec"] = (RecordingPolicy, dict(VARIANT))

_init = kc.EvictingCache.__init__


def _patched(self, *a, **k):
    _init(self, *a, **k)
    self.policy.cache = self


kc.EvictingCache.__init__ = _patched
