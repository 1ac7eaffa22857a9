"""The first reply only, as `bench replay` scores it: how well each ranking of the opening serves the reply that
follows it, with no memory profile (issue 64, part 2). Cheap enough to try several candidates on a selection set.

Each conversation is planned as `bench replay` plans it (4,096 tokens by default, `--system agent`); the budget is
the share of that whole plan, as in the full replay, but only the opening and the first reply are replayed. The
first reply's KL(full || memory) is pooled over its tokens, beside the next-reply oracle's.

    python research/opening_first_reply.py OUT.json TRACE... --specs 'nexus-agent@profile=none;h2o;...'
        [--budgets 0.25,0.5] [--model smollm2-135m] [--max-tokens 4096] [--system agent] [--threads 1]
        [--profile FILE] [--oracle-slack N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import research.policies  # noqa: E402,F401  (registers the research variants)
from benchmarks.replay import ReplayConfig, parse_spec, prepare  # noqa: E402
from benchmarks.replay_oracle import ReplyAttention, oracle_label, oracle_session  # noqa: E402
from benchmarks.replay_run import Spec, budget_tokens, compare, reference, session_for  # noqa: E402
from kvstore.models.registry import load_model  # noqa: E402
from kvstore.profiles.profile import MemoryProfile  # noqa: E402
from kvstore.profiles.tokens import TokenPrior  # noqa: E402
from research.statement_prior import StatementPrior  # noqa: E402
from research.task_surprise import patch_session  # noqa: E402


def token_prior(session, weights: torch.Tensor) -> None:
    """Give the session's opening the token prior: as its prior when no profile matches, and for the opening's
    tokens a matched profile leaves out (the task statement) when one does."""
    session.cache.signals.set_prior(weights)

    def filled(w: torch.Tensor) -> torch.Tensor:
        out = weights.clone()
        n = min(w.shape[-1], out.shape[-1])
        out[..., :n] = torch.where(w[..., :n] > 0, w[..., :n], out[..., :n])
        return out

    on_profile(session, filled)


def statement_prior(session, statement: StatementPrior, opening: list[int]) -> None:
    """A matched profile's weights completed by the statement prior (as negative weights: the statement)."""
    on_profile(session, lambda w: statement.for_statement(opening, w))


def on_profile(session, change) -> None:
    """The session's matched profile weights passed through `change` before its cache gets them."""
    signals = session.cache.signals
    own = signals.set_prior

    def changed(w: torch.Tensor, kind: str = "profile") -> None:
        own(change(w) if kind == "profile" else w, kind)

    signals.set_prior = changed


def first_reply(p):
    """The plan cut after its first assistant message."""
    i = next(i for i, m in enumerate(p.rest) if m["role"] == "assistant")
    return replace(p, rest=p.rest[: i + 1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--specs", required=True)
    ap.add_argument("--budgets", default="0.25")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--system", default="agent")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", default=None, help="memory profile for every spec but SPEC@profile=none")
    ap.add_argument("--oracle-slack", type=int, default=0, help="the oracle's prefill_slack (bench replay's)")
    ap.add_argument(
        "--token-prior", default=None, help="a profile whose per-token-id weights nexus-agent-tokprior gets"
    )
    ap.add_argument(
        "--statement-prior", default=None, help="research/statement_prior.py's table, for nexus-agent-sprior"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    patch_session()  # hands nexus-agent-surprise its positions; no other policy reads them
    specs = [parse_spec(s) for s in args.specs.split(";") if s.strip()]
    budgets = [float(b) for b in args.budgets.split(",")]
    model, tok, _ = load_model(args.model)
    limit = min(args.max_tokens, int(model.config.max_position_embeddings))
    cfg = ReplayConfig(tuple(specs), tuple(budgets), args.max_tokens, system=args.system)
    prior = None if args.token_prior is None else TokenPrior.of(MemoryProfile.load(args.token_prior))
    statement = None if args.statement_prior is None else StatementPrior.load(args.statement_prior)
    rows = []
    for path in args.traces:
        prepared = prepare(path, cfg, tok, limit, {"failed": []})
        if prepared is None:
            continue
        rep, whole = prepared
        p = first_reply(whole)
        t0 = time.perf_counter()
        full = session_for(model, tok, Spec("full"), None, 0, renderer=rep.renderer)
        record = ReplyAttention(len(full.cache.layers))
        with record.recording(model):
            ref = reference(full, p, record)
        for budget in budgets:
            tokens = budget_tokens(budget, whole.tokens)
            runs = [
                (
                    s.name + ("+profile" if args.profile and s.profiled else ""),
                    session_for(model, tok, s, tokens, 0, args.profile if s.profiled else None, rep.renderer),
                )
                for s in specs
            ]
            for _, session in runs:
                if session.config.policy in ("nexus-agent-tokprior", "nexus-agent-tp") and prior is not None:
                    token_prior(session, prior.prior_for(p.opening_ids))
                if session.config.policy == "nexus-agent-sprior" and statement is not None:
                    statement_prior(session, statement, p.opening_ids)
            oracle = oracle_session(model, tok, tokens, record, "next", args.oracle_slack)
            oracle.renderer = rep.renderer
            for name, session in runs + [(oracle_label("next", args.oracle_slack), oracle)]:
                (t,) = compare(session, p, ref)
                rows.append(
                    {
                        "conversation": rep.conversation.name,
                        "budget": budget,
                        "budget_tokens": tokens,
                        "opening": len(p.opening_ids),
                        "spec": name,
                        "kl": t.kl,
                        "tokens": t.tokens,
                        "top1": t.top1,
                    }
                )
        print(f"{rep.conversation.name}: opening {len(p.opening_ids)}, {time.perf_counter() - t0:.0f}s", flush=True)
        args.out.write_text(json.dumps({"rows": rows, "specs": args.specs, "model": args.model}, indent=1))
    report(rows)


def report(rows: list[dict]) -> None:
    for budget in sorted({r["budget"] for r in rows}):
        by = defaultdict(dict)
        for r in rows:
            if r["budget"] == budget:
                by[r["spec"]][r["conversation"]] = r
        convs = sorted(set.intersection(*(set(c) for c in by.values())))
        pooled = {s: sum(by[s][c]["kl"] for c in convs) / sum(by[s][c]["tokens"] for c in convs) for s in by}
        base = next((s for s in ("h2o", "h2o+profile") if s in pooled), None)  # baselines ignore --profile
        oracle = next((pooled[s] for s in sorted(pooled) if s.startswith("oracle:")), None)
        h2o = pooled.get(base)
        print(f"\nbudget {budget}: {len(convs)} conversations, first reply, KL pooled over its tokens")
        print(f"{'spec':60s} {'KL':>8s} {'/h2o':>6s} {'/oracle':>8s} {'<h2o':>5s}")
        for s in sorted(pooled, key=pooled.get):
            wins = sum(by[s][c]["kl"] < by[base][c]["kl"] for c in convs) if h2o else 0
            print(
                f"{s:60s} {pooled[s]:8.4f} {pooled[s] / h2o if h2o else 0:6.2f} "
                f"{pooled[s] / oracle if oracle else 0:8.2f} {wins:5d}"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:
        report([r for f in sys.argv[2:] for r in json.loads(Path(f).read_text())["rows"]])
    else:
        main()
