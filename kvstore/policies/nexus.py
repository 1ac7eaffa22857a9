"""Nexus Sampling: the Nexus score (direct window score + bridge walk) per layer, shared across heads, fed to the
n-averaged weighted reservoir. Based on "Nexus Sampling" (seeds/nexus-sampling-paper.txt, section 2).

Defaults and their sources (the paper, section 5.1; docs/algorithm.md): blocks of b = 32 tokens, W = 16, H = 3,
lambda = 0.5, n = 5; forced: the attention-sink block (sink = one block), `recent_blocks` = 1 most recent complete
block and the incomplete tail block (counted by its real size)."""

import torch

from kvstore.kernels import kv_head_block_scores_auto, window_block_scores_auto
from kvstore.policies.base import Policy, ScoreContext, head_token_attention, mean_received
from kvstore.scoring import block_spread, block_sum, kv_head_block_scores, nexus_weights, window_block_scores


class NexusPolicy(Policy):
    """`score_memory` (this project's option, docs/memory.md; "none" = the paper): "mean" or "max" combines each
    token's score over every eviction step it was held in (a block's score is then the mean or max of its Nexus
    weights so far, not only the current window's), kept as per-token state that survives eviction and saving."""

    name = "nexus"
    default_selector = "reservoir"
    default_sink = None  # one block

    def __init__(self, config) -> None:
        super().__init__(config)
        if config.score_memory != "none":
            self.token_state = ("nexus_score", "nexus_steps")

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        current = self.current_scores(ctx)
        return current if self.config.score_memory == "none" else self.remember(ctx, current)

    def current_scores(self, ctx: ScoreContext) -> torch.Tensor:
        """The Nexus weights of this step's window, one row per layer: [B, 1, N_k]."""
        cfg = self.config
        block_scores = window_block_scores if cfg.use_triton is False else window_block_scores_auto
        rows = []
        for i in range(ctx.keys.shape[0]):
            s_hat = block_scores(ctx.queries[i], ctx.keys[i], cfg.block, ctx.scaling)  # [W, N_k]
            rows.append(nexus_weights(s_hat, cfg.walk_steps, cfg.lam, cfg.eps_tie))  # [N_k]
        return torch.stack(rows)[:, None, :]  # [B, 1, N_k]

    def remember(self, ctx: ScoreContext, current: torch.Tensor) -> torch.Tensor:
        """Combine the current block weights [B, H, N_k] (H = 1 shared, or one row per kv head) with the held
        tokens' past ones: [B, H, N_k]. Each token carries its block's weight; a block's score is the mean over its
        tokens of their combined weights."""
        b, t, h = self.config.block, ctx.keys.shape[-2], current.shape[1]
        now = block_spread(current, b, t)  # [B, H, T]
        past, steps = ctx.state["nexus_score"][:, :h], ctx.state["nexus_steps"][:, :h]  # [B, H, T]
        if self.config.score_memory == "max":
            combined = torch.maximum(past, now)
            value = combined
        else:
            combined = past + now
            value = combined / (steps + 1)
        if ctx.commit:
            ctx.state["nexus_score"].copy_(combined.expand_as(ctx.state["nexus_score"]))
            ctx.state["nexus_steps"].add_(1)
        return block_sum(value, b) / b


class NexusHeadPolicy(NexusPolicy):
    """The Nexus score per kv head: each kv head scores the blocks with its own group of query heads and keeps its
    own blocks (the paper scores once per layer, averaged over all heads; this variant is this project's, measured
    with `bench replay`, docs/memory.md)."""

    name = "nexus-head"
    per_head = True

    def current_scores(self, ctx: ScoreContext) -> torch.Tensor:
        """The Nexus weights of this step's window, one row per kv head: [B, Hkv, N_k]."""
        cfg = self.config
        block_scores = kv_head_block_scores if cfg.use_triton is False else kv_head_block_scores_auto
        out = []
        for i in range(ctx.keys.shape[0]):
            s_hat = block_scores(ctx.queries[i], ctx.keys[i], cfg.block, ctx.scaling)  # [Hkv, W, N_k]
            out.append(nexus_weights(s_hat, cfg.walk_steps, cfg.lam, cfg.eps_tie))  # all kv heads at once
        return torch.stack(out)  # [B, Hkv, N_k]


class NexusAccPolicy(NexusHeadPolicy):
    """This project's hybrid (docs/memory.md, measured with `bench replay`): per kv head and per token, the score is
    `acc_weight` x the attention the token received from every query since it arrived, divided by the queries that
    could attend (H2O's normalised accumulated attention), plus its block's per-kv-head Nexus score (remembered over
    the eviction steps when `score_memory` is set), plus `reply_weight` x the attention it received from the agent's
    own replies only, divided by the reply queries that could attend; each term scaled to mean 1 over the held
    tokens. With `own_weight` > 0, every token the agent's replies wrote gets `own_weight` on top (the cache's
    reply spans say which: no per-token state of its own).

    With `opening_nexus=False` (the default memory) and no memory profile, the Nexus term is left out until the
    first reply query has been seen: the opening is then ranked by its accumulated attention alone.

    The reply term needs to know which queries are the agent's: the session marks the reply it runs (generated or
    teacher-forced) with `EvictingCache.reply_from` and earlier ones with `EvictingCache.replies` (a re-prefill runs
    them again, anywhere inside a prefill chunk); a cache nobody marks keeps the term at 0.

    With a memory profile (ctx.prior, kvstore.profile) the accumulated attention of the opening's fixed template
    tokens is replaced by the profile's weights, rescaled to the same mean over the held template tokens: what the
    agent's replies attended there in calibration conversations, instead of what the opening's own queries attended.

    Why three terms: on recorded agent conversations the accumulated attention keeps what the long opening (system
    prompt and task, compressed chunk by chunk before any reply) needs, where the window-scored Nexus score loses it;
    the Nexus score, scored at the end of each new message, keeps what the later replies need better than H2O; and
    what earlier replies attended predicts what the next reply attends better than what tool output and user text
    attended, which is most of the queries. Before any reply, the Nexus window (the last queries of a 512-token
    chunk in the middle of the task text) ranks the opening worse than all of its queries do, unless a profile
    ranks the fixed text. Costs H2O's extra attention pass over every new query
    (docs/benchmarks.md, overhead)."""

    name = "nexus-agent"
    granularity = "token"
    per_head = True
    uses_profile = True  # ctx.prior replaces the template tokens' accumulated attention

    def __init__(self, config) -> None:
        super().__init__(config)
        replies = ("reply_acc", "reply_seen") if config.reply_weight > 0 else ()
        self.token_state = ("acc",) + replies + tuple(self.token_state)
        self.reads_own = config.own_weight > 0

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        received = head_token_attention(ctx, new_queries)
        ctx.state["acc"] += received
        mask = ctx.reply_queries  # which new queries (at positions [seen - q, seen)) are the agent's reply's
        if "reply_acc" not in ctx.state or mask is None:
            return
        q, m = new_queries.shape[-2], int(mask.sum())
        if m == 0:
            return
        seen = ctx.state["reply_seen"]  # per held token: the reply queries that could attend it
        if bool(mask[q - m :].all()):  # a suffix: the reply running now (or a whole reply's forward)
            ctx.state["reply_acc"] += received if m == q else head_token_attention(ctx, new_queries[..., q - m :, :])
            seen += m  # every held token could be attended by all m, except the m newest (causal)
            if m > 1:  # the new tokens are the last slots, in order: the i-th newest but one saw i fewer
                seen[..., -m:] -= torch.arange(m, device=seen.device, dtype=seen.dtype)
            return
        # earlier replies inside a chunk (a re-prefill runs the whole history again): only their queries count
        ctx.state["reply_acc"] += head_token_attention(ctx, new_queries, weights=mask.float())
        at = torch.arange(ctx.seen - q, ctx.seen)[mask].to(ctx.positions.device)  # the reply queries' positions
        seen += (len(at) - torch.searchsorted(at, ctx.positions.contiguous())).to(seen)

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        acc = mean_received(ctx.state["acc"], ctx)  # [B, Hkv, T]
        if ctx.prior is not None:
            acc = with_prior(acc, ctx.prior)
        nexus = block_spread(super().score(ctx), self.config.block, acc.shape[-1])  # [B, Hkv, N_k] -> [B, Hkv, T]
        score = self.config.acc_weight * _unit_mean(acc) + self._nexus_on(ctx, acc.dtype) * _unit_mean(nexus)
        if "reply_acc" in ctx.state:
            reply = ctx.state["reply_acc"] / ctx.state["reply_seen"].clamp_min(1)
            score = score + self.config.reply_weight * _unit_mean(reply)
        if ctx.own is not None:
            score = score + self.config.own_weight * ctx.own.to(score.dtype)
        return score

    def _nexus_on(self, ctx: ScoreContext, dtype: torch.dtype) -> torch.Tensor | float:
        """The Nexus term's weight: 1, or with `opening_nexus=False` 0 for each row ranking an opening without a
        memory profile before any reply query has been seen ([B, 1, 1]). Its remembered score counts either way."""
        if self.config.opening_nexus or ctx.prior is not None or "reply_seen" not in ctx.state:
            return 1.0
        return (ctx.state["reply_seen"].flatten(1).amax(1) > 0).to(dtype)[:, None, None]


def with_prior(acc: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """acc with its template tokens (prior > 0) scored by the prior instead, scaled so that both have the same sum
    over the held template tokens of each head: the ranking inside the template is the profile's, the weight of the
    template against the other tokens stays what the observed attention says."""
    template = prior > 0
    scale = (acc * template).sum(-1, keepdim=True) / (prior * template).sum(-1, keepdim=True).clamp_min(1e-30)
    return torch.where(template, prior * scale, acc)


def _unit_mean(s: torch.Tensor) -> torch.Tensor:
    return s / s.mean(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)
