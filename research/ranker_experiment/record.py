"""python record.py OUTDIR PROFILE BUDGET TRACE...: record features + oracle labels while the default replays (with
RANKER=W.pt set: while that weight table ranks, as run_replay.py does)."""

import os
import sys
import time
from pathlib import Path

import common  # registers the policies
import torch
from rankpol import RecordingPolicy, load_weights

from benchmarks.replay_oracle import ReplyAttention, attention_received, per_kv_head
from benchmarks.replay_run import Spec, budget_tokens, compare, session_for
from kvstore.models.registry import load_model


class PeakAttention(ReplyAttention):
    """Also keeps, per reply and layer, the most attention any single query of the reply (mean over each kv head's
    query heads of the per-head max) gave each token."""

    def __init__(self, num_layers):
        super().__init__(num_layers)
        self.peaks = {}

    def start(self, turn):
        super().start(turn)
        self.peaks[turn] = [None] * self.num_layers

    def add(self, layer_idx, query, key, scaling):
        super().add(layer_idx, query, key, scaling)
        m = per_kv_head(attention_received(query[0], key[0], scaling, reduce="max"), key.shape[1]).cpu()
        old = self.peaks[self.turn][layer_idx]
        if old is not None:
            m[:, : old.shape[-1]] = torch.maximum(m[:, : old.shape[-1]], old)
        self.peaks[self.turn][layer_idx] = m


torch.set_num_threads(1)
if os.environ.get("RANKER"):
    load_weights()
out, profile, budget = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
model, tok, info = load_model("smollm2-135m", dtype="bf16")
for path in sys.argv[4:]:
    t0 = time.time()
    conv, p, ref, record = common.full_reference(model, tok, path, PeakAttention)
    RecordingPolicy.record, RecordingPolicy.rows = record, []
    tokens = budget_tokens(budget, p.tokens)
    sess = session_for(model, tok, Spec("nexus-agent-rec"), tokens, 0, profile)
    turns = compare(sess, p, ref)
    n = sum(t.tokens for t in turns)
    kl, top1 = sum(t.kl for t in turns), sum(t.top1 for t in turns)
    rows = RecordingPolicy.rows
    torch.save({"rows": rows, "kl": kl, "top1": top1, "n": n, "tokens": p.tokens}, out / f"{conv.name}.pt")
    print(
        f"{conv.name}: kl {kl / n:.4f} top1 {top1 / n:.3f} groups {len(rows)} rows "
        f"{sum(r[1].shape[1] for r in rows) * 3} {time.time() - t0:.0f}s",
        flush=True,
    )
