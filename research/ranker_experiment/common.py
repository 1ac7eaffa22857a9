"""Registers the experiment's policies (nexus-agent-ranked, nexus-agent-rec) and gives every cache's policy a
reference to its cache (the role features read the reply spans). Imported first by the drivers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rankpol import RankedPolicy, RecordingPolicy

import kvstore.cache.evicting as kc
import kvstore.policies as P

VARIANT = {"selector": "topk", "recent_share": 0.5, "score_memory": "mean", "opening_nexus": False}
P.POLICIES["nexus-agent-ranked"] = (RankedPolicy, dict(VARIANT))
P.POLICIES["nexus-agent-rec"] = (RecordingPolicy, dict(VARIANT))

_init = kc.EvictingCache.__init__


def _patched(self, *a, **k):
    _init(self, *a, **k)
    self.policy.cache = self


kc.EvictingCache.__init__ = _patched


def full_reference(model, tok, path, record_cls, max_tokens: int = 5120):
    """One conversation replayed on the full cache with its replies' attention recorded: (conversation, plan,
    reference, record)."""
    from benchmarks.replay_run import Spec, reference, session_for
    from kvstore.session.render import ChatRenderer
    from kvstore.session.teacher import plan
    from pipeline.conversations import load_conversation

    conv = load_conversation(Path(path))
    p = plan(conv.messages, ChatRenderer(tok), max_tokens)
    full = session_for(model, tok, Spec("full"), None, 0)
    record = record_cls(len(full.cache.layers))
    with record.recording(model):
        ref = reference(full, p, record)
    return conv, p, ref, record
