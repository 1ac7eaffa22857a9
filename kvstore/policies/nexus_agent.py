"""The default memory `nexus-agent`: per kv head and per token, the accumulated attention, the remembered Nexus
score, the attention from the agent's own replies and a bonus for the agent's own tokens (docs/algorithm.md; the
measurements in docs/memory.md)."""

from dataclasses import dataclass

import torch

from kvstore.attention.scoring import block_spread
from kvstore.errors import KVStoreError
from kvstore.policies.base import ScoreContext, mean_received, observed_sums
from kvstore.policies.nexus import NexusHeadPolicy, NexusSettings


@dataclass
class NexusAgentSettings(NexusSettings):
    acc_weight: float = 1.0  # weight of the accumulated attention next to the Nexus score (weight 1)
    reply_weight: float = 1.0  # weight of the attention from the agent's own replies (0: not kept)
    own_weight: float = 0.0  # a bonus to every token the agent's own replies wrote (0: not kept)
    opening_nexus: bool = True  # the Nexus term before the first reply even without a profile (False: off)
    token_blend: float = 0.5  # share of a token prior (an opening no profile matched) in its tokens' attention term
    last_weight: float = 0.0  # a further bonus to the tokens of the agent's latest finished reply (with own_weight)
    task_head: int = 32  # the first tokens of the task's text in an opening a profile matched, given `task_weight`
    task_weight: float = 4.0  # the bonus of each of those tokens (the task's title: replies restate it)
    name_weight: float = 0.0  # a bonus to the code names of the task's text (kvstore.profiles.names)
    task_text_weight: float = 0.0  # a bonus to every token of the task's text once a reply has been seen (where a
    # profile matched: the statement replies restate all session long, its quotes, examples and flags)
    opening_recent_share: float | None = None  # the recent share before the first reply in an opening a profile
    # matched (its template's tail is the profile's to rank; at most recent_share); None: recent_share throughout

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.token_blend <= 1.0:
            raise KVStoreError(f"token_blend must be in [0, 1], got {self.token_blend}")
        named = ("acc_weight", "reply_weight", "own_weight", "last_weight", "task_head", "task_weight", "name_weight")
        named += ("task_text_weight",)
        negative = [f"{n}={getattr(self, n)}" for n in named if getattr(self, n) < 0]
        if negative:
            raise KVStoreError(f"{', '.join(named)} must be >= 0, got {', '.join(negative)}")
        if self.opening_recent_share is not None and not 0.0 <= self.opening_recent_share < 1.0:
            raise KVStoreError(f"opening_recent_share must be in [0, 1), got {self.opening_recent_share}")


class NexusAgentPolicy(NexusHeadPolicy):
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
    teacher-forced) with `SessionSignals.reply_from` and earlier ones with `SessionSignals.replies` (a re-prefill runs
    them again, anywhere inside a prefill chunk); a cache nobody marks keeps the term at 0.

    With a memory profile (ctx.prior, kvstore.profiles.profile) the accumulated attention of the opening's fixed
    template
    tokens is replaced by the profile's weights, rescaled to the same mean over the held template tokens: what the
    agent's replies attended there in calibration conversations, instead of what the opening's own queries attended.
    With a token prior instead (ctx.prior_kind "tokens": an opening no profile matched, ranked by what replies read
    of each token id in a profile's template, kvstore.profiles.tokens), the accumulated attention is blended with
    it (`token_blend` of the prior, each scaled to mean 1) and the Nexus term waits for the first reply, as with no
    profile: on the selection conversations the blend beat both the prior alone and the attention alone.

    Where a profile matched, the first `task_head` tokens of the task's own text (right after the matched prefix:
    the issue's title, which replies restate) get `task_weight` on top, as the agent's own tokens get `own_weight`:
    on an opening far larger than the budget, the chunked prefill otherwise ranks them by what the text after them
    (a long traceback) attends. The code names of the task's text (SessionSignals.names: dotted names, names with an
    underscore or inner capitals, calls, paths; their first occurrence, outside traceback frames; where no profile
    matched, those of the whole first user message) get `name_weight` on top: replies restate them after the first
    tool output about as long as the budget. Once a reply has been seen, every token of a matched opening's task
    text gets `task_text_weight` on top: replies restate the statement all session long (the error message it
    quotes, grepped for; the example it gives, copied into a reproduction script), where the tool outputs would push
    it out.

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
    settings_type = NexusAgentSettings

    def __init__(self, config, settings=None) -> None:
        super().__init__(config, settings)
        replies = ("reply_acc", "reply_seen") if self.settings.reply_weight > 0 else ()
        self.token_state = ("acc",) + replies + tuple(self.token_state)
        self.reads_own = self.settings.own_weight > 0 or self.settings.last_weight > 0
        self.reads_names = self.settings.name_weight > 0

    def _replies(self, ctx: ScoreContext) -> int:
        """How many of the observed queries are the agent's reply's (0 without the reply term)."""
        mask = ctx.reply_queries  # which new queries (at positions [seen - q, seen)) are the agent's reply's
        return 0 if "reply_acc" not in ctx.state or mask is None else int(mask.sum())

    def observe_weightings(self, ctx: ScoreContext) -> list[torch.Tensor | None]:
        m = self._replies(ctx)
        if m == 0 or m == len(ctx.reply_queries):  # every query once serves both terms (or the only one)
            return [None]
        return [None, ctx.reply_queries.float()]  # both sums from the same logits: every query's, the reply's only

    def observe(self, ctx: ScoreContext, new_queries: torch.Tensor) -> None:
        mask = ctx.reply_queries
        q = new_queries.shape[-2]
        m = self._replies(ctx)
        sums = observed_sums(ctx, new_queries, self.observe_weightings(ctx))
        received, reply = sums[0], sums[-1]
        ctx.state["acc"] += received
        if m == 0:
            return
        ctx.state["reply_acc"] += reply
        seen = ctx.state["reply_seen"]  # per held token: the reply queries that could attend it
        if bool(mask[q - m :].all()):  # a suffix: the reply running now (or a whole reply's forward)
            seen += m  # every held token could be attended by all m, except the m newest (causal)
            if m > 1:  # the new tokens are the last slots, in order: the i-th newest but one saw i fewer
                seen[..., -m:] -= torch.arange(m, device=seen.device, dtype=seen.dtype)
            return
        # earlier replies inside a chunk (a re-prefill runs the whole history again): only their queries count
        at = torch.arange(ctx.seen - q, ctx.seen)[mask].to(ctx.positions.device)  # the reply queries' positions
        seen += (len(at) - torch.searchsorted(at, ctx.positions.contiguous())).to(seen)

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        acc = mean_received(ctx.state["acc"], ctx)  # [B, Hkv, T]
        if ctx.prior is not None and ctx.prior_kind == "tokens":  # a token prior: blended with the attention
            b = self.settings.token_blend
            acc = (1 - b) * _unit_mean(acc) + b * _unit_mean(with_prior(acc, ctx.prior))
        elif ctx.prior is not None:
            acc = with_prior(acc, ctx.prior)
        nexus = block_spread(super().score(ctx), self.config.block, acc.shape[-1])  # [B, Hkv, N_k] -> [B, Hkv, T]
        score = self.settings.acc_weight * _unit_mean(acc) + self._nexus_on(ctx, acc.dtype) * _unit_mean(nexus)
        if "reply_acc" in ctx.state:
            reply = ctx.state["reply_acc"] / ctx.state["reply_seen"].clamp_min(1)
            score = score + self.settings.reply_weight * _unit_mean(reply)
        if ctx.own is not None:
            score = score + self.settings.own_weight * ctx.own.to(score.dtype)
        if ctx.last_own is not None and self.settings.last_weight > 0:
            score = score + self.settings.last_weight * ctx.last_own.to(score.dtype)
        if ctx.names is not None:
            score = score + self.settings.name_weight * ctx.names.to(score.dtype)
        return score + self._task_bonus(ctx, score.dtype)

    def _task_bonus(self, ctx: ScoreContext, dtype: torch.dtype) -> torch.Tensor | float:
        """Where a profile matched the opening (ctx.task_span), else 0: `task_weight` for the held tokens among the
        first `task_head` of the task's text, and `task_text_weight` for every token of it in each row that has seen
        a reply query (the opening's own eviction ranks without it: the first reply needs the template's call
        syntax more than the statement's every line)."""
        task = task_tokens(ctx)
        if task is None:
            return 0.0
        bonus: torch.Tensor | float = 0.0
        s = self.settings
        if s.task_head > 0 and s.task_weight > 0:
            head = task & (ctx.positions < ctx.task_span[0] + s.task_head)
            bonus = s.task_weight * head.to(dtype)
        if s.task_text_weight > 0:
            text = task.to(dtype)
            if "reply_seen" in ctx.state:  # without the reply term's state: from the opening on
                text = text * _replied(ctx).to(dtype)[:, None, None]
            bonus = bonus + s.task_text_weight * text
        return bonus

    def recent_share(self, ctx: ScoreContext | None) -> float:
        """`opening_recent_share` (never more than `recent_share`) while a profile-matched opening is evicted before
        any reply query: the profile ranks the template's tail, which the recent window would otherwise hold with
        the task text's last lines; the rest of the time `recent_share`, for the latest tool output."""
        share, opening = self.config.recent_share, self.settings.opening_recent_share
        if opening is None or ctx is None or not _profiled(ctx) or "reply_seen" not in ctx.state:
            return share
        return share if bool(_replied(ctx).any()) else min(share, opening)

    def _nexus_on(self, ctx: ScoreContext, dtype: torch.dtype) -> torch.Tensor | float:
        """The Nexus term's weight: 1, or with `opening_nexus=False` 0 for each row ranking an opening without a
        memory profile before any reply query has been seen ([B, 1, 1]). Its remembered score counts either way."""
        if self.settings.opening_nexus or _profiled(ctx) or "reply_seen" not in ctx.state:
            return 1.0
        return _replied(ctx).to(dtype)[:, None, None]


def task_tokens(ctx: ScoreContext) -> torch.Tensor | None:
    """[B, Hkv, T] bool: which held tokens lie in the task's text of an opening a profile matched (ctx.task_span);
    None without one."""
    if ctx.task_span is None:
        return None
    start, end = ctx.task_span
    return (ctx.positions >= start) & (ctx.positions < end)


def _profiled(ctx: ScoreContext) -> bool:
    """Whether a matched memory profile ranks the opening's template (a token prior does not count: as none)."""
    return ctx.prior is not None and ctx.prior_kind == "profile"


def _replied(ctx: ScoreContext) -> torch.Tensor:
    """[B] bool: whether each row has seen a query of the agent's replies (its reply term's state)."""
    return ctx.state["reply_seen"].flatten(1).amax(1) > 0


def with_prior(acc: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """acc with its template tokens (prior > 0) scored by the prior instead, scaled so that both have the same sum
    over the held template tokens of each head: the ranking inside the template is the profile's, the weight of the
    template against the other tokens stays what the observed attention says."""
    template = prior > 0
    scale = (acc * template).sum(-1, keepdim=True) / (prior * template).sum(-1, keepdim=True).clamp_min(1e-30)
    return torch.where(template, prior * scale, acc)


def _unit_mean(s: torch.Tensor) -> torch.Tensor:
    return s / s.mean(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)
