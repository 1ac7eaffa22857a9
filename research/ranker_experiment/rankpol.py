"""Experiment: a per-(layer, kv head) logistic ranking over the default memory's own terms.

RankTerms computes the default's three unit-mean terms once per step and a feature row per held token;
RecordingPolicy scores as the default does and records features + the future-replies oracle's top-K label;
RankedPolicy ranks by the fitted weight table instead."""

import os
import random
from pathlib import Path

import torch

from kvstore.attention.scoring import block_spread
from kvstore.cache.eviction import layout_for
from kvstore.policies.base import mean_received
from kvstore.policies.nexus import NexusAccPolicy, NexusPolicy, _unit_mean, with_prior

NAMES = ["a", "n", "r", "log_a", "log_n", "log_r", "log_age", "tmpl", "task", "reply", "one"]
F = len(NAMES)


class RankTerms(NexusAccPolicy):
    cache = None  # set by the session

    def parts(self, ctx):
        acc = mean_received(ctx.state["acc"], ctx)
        if ctx.prior is not None:
            acc = with_prior(acc, ctx.prior)
        t = acc.shape[-1]
        nexus = block_spread(NexusPolicy.score(self, ctx), self.config.block, t)
        a = _unit_mean(acc)
        n = _unit_mean(nexus) * self._nexus_on(ctx, acc.dtype)
        if "reply_acc" in ctx.state:
            r = _unit_mean(ctx.state["reply_acc"] / ctx.state["reply_seen"].clamp_min(1))
        else:
            r = torch.zeros_like(a)
        return a, n, r

    def default_score(self, a, n, r):
        return self.config.acc_weight * a + n + self.config.reply_weight * r

    def ranked(self, ctx, a, n, r):
        """The weight table's logit per held token, shifted to be positive: [B, Hkv, T]."""
        x = self.features(ctx, a, n, r)  # [B, Hkv, T, F]
        if RankedPolicy.expand:
            x = expand(x)
        w = RankedPolicy.weights[ctx.layer_idx].to(x)  # [Hkv, F]
        logit = (x * w[None, :, None, :]).sum(-1)
        return logit - logit.amin(-1, keepdim=True) + 1e-6

    def features(self, ctx, a, n, r):
        pos = ctx.positions
        cache = self.cache
        starts = [s for s, _ in cache.replies] + ([cache.reply_from] if cache.reply_from is not None else [])
        opening_end = min(starts) if starts else 10**9
        in_reply = torch.zeros_like(pos, dtype=torch.bool)
        for s, e in cache.replies:
            in_reply |= (pos >= s) & (pos < e)
        if cache.reply_from is not None:
            in_reply |= pos >= cache.reply_from
        tmpl = (ctx.prior > 0) if ctx.prior is not None else torch.zeros_like(in_reply)
        task = (pos < opening_end) & ~tmpl
        age = (ctx.seen - pos).clamp_min(1).float()
        eps = 0.05
        cols = [
            a,
            n,
            r,
            (a + eps).log(),
            (n + eps).log(),
            (r + eps).log(),
            age.log(),
            tmpl.float(),
            task.float(),
            in_reply.float(),
            torch.ones_like(a),
        ]
        return torch.stack([c.float() for c in cols], -1)  # [B, Hkv, T, F]


class RecordingPolicy(RankTerms):
    record = None  # benchmarks.replay_oracle.ReplyAttention of the full-cache replay
    rows = None  # list of (layer, X [Hkv, n, F] half, y [Hkv, n] bool)
    share = 1 / 3
    rng = random.Random(0)

    def score(self, ctx):
        a, n, r = self.parts(ctx)
        # with a table loaded (record.py with RANKER set) it evicts as the ranked policy does, so the rows come from
        # the table's own trajectory (for refitting on it: the inputs it meets when it decides)
        s = self.ranked(ctx, a, n, r) if RankedPolicy.weights is not None else self.default_score(a, n, r)
        if ctx.commit and self.rng.random() < self.share:
            self._record(ctx, a, n, r)
        return s

    def _record(self, ctx, a, n, r):
        turns = self.record.ahead(ctx.seen)
        if not turns:
            return
        t = ctx.positions.shape[-1]
        budget = self.cache.layer_budget_tokens(ctx.layer_idx)
        lay = layout_for(self, t, budget)
        k = max(0, budget - lay.forced(t))
        lo, hi = lay.sink_end, lay.recent_start
        if k <= 0 or k >= hi - lo:
            return
        total = torch.zeros(ctx.positions.shape, dtype=torch.float32)
        peak = torch.zeros(ctx.positions.shape, dtype=torch.float32)
        for turn in turns:
            table = self.record.tables[turn][ctx.layer_idx]
            total += table.expand(ctx.positions.shape[0], -1, -1).gather(-1, ctx.positions)
            if getattr(self.record, "peaks", None) is not None:
                table = self.record.peaks[turn][ctx.layer_idx]
                peak = torch.maximum(peak, table.expand(ctx.positions.shape[0], -1, -1).gather(-1, ctx.positions))
        cand = total[0, :, lo:hi]  # [Hkv, n]
        top = cand.topk(k, -1).indices
        y = torch.zeros_like(cand, dtype=torch.bool).scatter_(-1, top, True)
        x = self.features(ctx, a, n, r)[0, :, lo:hi]
        self.rows.append((ctx.layer_idx, x.half(), y, cand.clone(), peak[0, :, lo:hi].clone(), k))


class RankedPolicy(RankTerms):
    name = "nexus-agent-ranked"
    weights = None  # [L, Hkv, F]
    expand = False

    def score(self, ctx):
        return self.ranked(ctx, *self.parts(ctx))


def expand(x):
    """The base columns and their products with the roles: [..., F] -> [..., F + 15]."""
    col = {name: x[..., i] for i, name in enumerate(NAMES)}
    extra = []
    for role in ("tmpl", "task", "reply"):
        for term in ("a", "n", "r", "log_a", "log_r"):
            extra.append(col[term] * col[role])
    return torch.cat([x, torch.stack(extra, -1)], -1)


def load_weights(path=None):
    path = path or os.environ["RANKER"]
    d = torch.load(path)
    RankedPolicy.weights = d["w"].float()
    RankedPolicy.expand = bool(d.get("expand", False))


def recordings(folder, names=()):
    """record.py's files in `folder`, sorted; only those whose names contain one of `names`, if any are given."""
    files = sorted(Path(folder).glob("*.pt"))
    return [f for f in files if any(o in f.name for o in names)] if names else files


def default_logit(x):
    """The default's score (the three terms at weight 1, as nexus-agent has them) from feature rows [..., F]."""
    return x[..., NAMES.index("a")] + x[..., NAMES.index("n")] + x[..., NAMES.index("r")]
