"""A prior for the task statement of a matched opening (issue 64, with-profile replies).

A memory profile ranks the fixed text of an agent's opening; the task statement between its prefix and suffix is
ranked by the opening's own attention, and that is where the first replies lose most to the next-reply oracle: a
reply copies a path, a class name or an error message from the statement that the chunked prefill evicted. This
asks whether what replies read of statement tokens in other conversations, by token id, ranks a new statement
better.

Building (`build`): each calibration conversation is replayed on the full cache as `bench replay` plans it; per
layer and kv head, the attention every reply gives each statement token (the opening's tokens the profile leaves at
0), on the template's scale (divided by the mean over the conversation's template tokens), averaged per token id
over every occurrence in every conversation. Unknown ids get the mean over all statement tokens.

Using: `research/opening_first_reply.py --statement-prior FILE` hands a session's matched opening the prior as
negative weights on its statement tokens; policy `nexus-agent-sprior` (research/policies.py) blends the opening
ranked by profile and prior together (`stmt_blend` of it) with the default's ranking. Measured before the task's
head existed (research/opening-issue64.md, section 3): its marks leave the opening no run of 0 weights, so the
product's task head (kvstore.policies.nexus_agent, `task_head`) does not apply under it.

    python research/statement_prior.py OUT.pt TRACE... --profile builtin-v2-smollm2-135m.pt [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kvstore.policies.base import ScoreContext, mean_received  # noqa: E402
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings, _unit_mean, with_prior  # noqa: E402


@dataclass
class StatementPriorSettings(NexusAgentSettings):
    stmt_blend: float = 0.5  # share of the opening ranked by profile + statement prior (0: the default)


class StatementPriorPolicy(NexusAgentPolicy):
    """The default memory; a prior < 0 marks a statement token and its (negated) statement-prior weight."""

    name = "nexus-agent-sprior"
    settings_type = StatementPriorSettings

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        prior = ctx.prior
        if prior is None or ctx.prior_kind != "profile":
            return super().score(ctx)
        ctx.prior = prior.clamp_min(0)
        try:
            score = super().score(ctx)
        finally:
            ctx.prior = prior
        acc = mean_received(ctx.state["acc"], ctx)
        default = with_prior(acc, prior.clamp_min(0))
        whole = with_prior(acc, prior.abs())
        b = self.settings.stmt_blend
        blended = (1 - b) * _unit_mean(default) + b * _unit_mean(whole)
        return score + self.settings.acc_weight * (_unit_mean(blended) - _unit_mean(default))


@dataclass(frozen=True)
class StatementPrior:
    ids: dict[int, int]
    weights: torch.Tensor  # [L, Hkv, n]
    unknown: torch.Tensor  # [L, Hkv]

    def for_statement(self, opening: list[int], template: torch.Tensor) -> torch.Tensor:
        """[L, Hkv, len(opening)]: the template's weights where `template` > 0, minus the statement prior
        elsewhere."""
        table = torch.cat([self.weights, self.unknown[..., None]], -1).clamp_min(1e-3)
        cols = torch.tensor([self.ids.get(t, self.weights.shape[-1]) for t in opening], dtype=torch.int64)
        return torch.where(template > 0, template, -table[..., cols])

    def save(self, path: Path) -> None:
        torch.save({"ids": self.ids, "weights": self.weights, "unknown": self.unknown}, path)

    @classmethod
    def load(cls, path: Path) -> StatementPrior:
        d = torch.load(path)
        return cls(d["ids"], d["weights"], d["unknown"])


def build(model, tok, traces: list[Path], profile, system: str, max_tokens: int, first_only: bool) -> StatementPrior:
    from benchmarks.replay import ReplayConfig, prepare
    from benchmarks.replay_oracle import ReplyAttention
    from benchmarks.replay_run import Spec, reference, session_for
    from research.opening_first_reply import first_reply

    cfg = ReplayConfig((), (0.25,), max_tokens, system=system)
    sums, counts, stmt_all = {}, {}, []
    for path in traces:
        prepared = prepare(path, cfg, tok, max_tokens, {"failed": []})
        if prepared is None:
            continue
        rep, whole = prepared
        p = first_reply(whole) if first_only else whole
        n = len(p.opening_ids)
        matched = profile.prior_for(p.opening_ids)
        if matched is None:
            print(f"{path.name}: the profile does not match; left out", flush=True)
            continue
        template = matched[0][0, 0] > 0  # [n]
        full = session_for(model, tok, Spec("full"), None, 0, renderer=rep.renderer)
        record = ReplyAttention(len(full.cache.layers))
        with record.recording(model):
            reference(full, p, record)
        att = sum(torch.stack([t[:, :n] for t in record.tables[turn]]) for turn in record.tables)  # [L, Hkv, n]
        att = att / att[..., template].mean(-1, keepdim=True).clamp_min(1e-12)
        stmt = ~template
        stmt_all.append(att[..., stmt])
        for i in stmt.nonzero().flatten().tolist():
            t = p.opening_ids[i]
            sums[t] = sums.get(t, 0) + att[..., i]
            counts[t] = counts.get(t, 0) + 1
        print(f"{path.name}: {int(stmt.sum())} statement tokens of {n}", flush=True)
    ids = {t: i for i, t in enumerate(sums)}
    weights = torch.stack([sums[t] / counts[t] for t in sums], -1)
    unknown = torch.cat(stmt_all, -1).mean(-1)
    return StatementPrior(ids, weights, unknown)


def main() -> None:
    from kvstore.models.registry import load_model
    from kvstore.profiles.profile import MemoryProfile

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--system", default="agent")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--first-only", action="store_true", help="the first reply's attention only")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, _ = load_model(args.model)
    prior = build(
        model, tok, args.traces, MemoryProfile.load(args.profile), args.system, args.max_tokens, args.first_only
    )
    prior.save(args.out)
    print(f"{args.out}: {len(prior.ids)} token ids", flush=True)


if __name__ == "__main__":
    main()
