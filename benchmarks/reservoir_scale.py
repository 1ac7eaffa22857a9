"""`nexus-agent bench reservoir`: how far the n-averaged reservoir's kept set is from top-K at the weight scale the
Nexus score really produces (weights sum to ~1 over N_k blocks, so w ~ 1/N_k), and with the weights rescaled to a
mean of 1 (the Nexus option reservoir_mean).

The weights are real: the Nexus score of every layer of the model after a prefix of a recorded conversation.
For each n and scale it reports the overlap of the kept set with top-K and the share of top-K's weight kept.
"""

from __future__ import annotations

from pathlib import Path

import torch
import typer

import kvstore
from benchmarks.common import console, table, write_json
from benchmarks.replay_data import default_traces
from kvstore.attention.scoring import nexus_weights, window_block_scores
from kvstore.models.registry import load_model
from kvstore.policies.selection import select
from kvstore.session.render import ChatRenderer
from pipeline.conversations import load_conversation


def real_weights(model, tokenizer, messages: list[dict], tokens: int, block: int = 32) -> list[torch.Tensor]:
    """Nexus weights [N_k] of every layer after the first `tokens` tokens of a conversation (full cache)."""

    ids = ChatRenderer(tokenizer).encode_messages(messages, first=True)[:tokens]
    cache = kvstore.make_cache(model, policy="nexus", budget=None)  # never evicts; keeps Nexus's window of queries
    kvstore.prefill(model, cache, torch.tensor([ids], device=next(model.parameters()).device))
    out = []
    for layer in cache.layers:
        s_hat = window_block_scores(layer.window_q[0], layer.keys[0], block, getattr(layer, "scaling", None))
        out.append(nexus_weights(s_hat))  # [N_k], sums to ~1
    return out


def kept_vs_topk(w: torch.Tensor, k: int, n: int, mean: float | None, draws: int, seed: int = 0) -> tuple[float, float]:
    """(mean |kept ∩ top-K| / K, mean kept weight / top-K weight) over `draws` reservoir selections of k of w [N]."""
    gen = torch.Generator().manual_seed(seed)
    scaled = w * (mean * len(w) / w.sum()) if mean else w
    top = set(torch.topk(w, k).indices.tolist())
    top_mass = float(w[list(top)].sum())
    overlap = mass = 0.0
    for _ in range(draws):
        kept = select(scaled[None], k, "reservoir", n, gen)[0].tolist()
        overlap += len(top & set(kept)) / k
        mass += float(w[kept].sum()) / top_mass
    return overlap / draws, mass / draws


def main(model: str, tokens: int, share: float, ns: str, means: str, draws: int, json_out: Path | None) -> None:
    """The run of `nexus-agent bench` reservoir_cmd: its options and help are in benchmarks.commands.reservoir_cmd."""

    traces = default_traces()
    if not traces:
        raise typer.BadParameter("no shared traces: set NEXUS_SHARED_DATA")
    m, tok, _ = load_model(model)
    weights = real_weights(m, tok, load_conversation(traces[0]).messages, tokens)
    rows = []
    for mean_text in means.split(","):
        mean = None if mean_text == "raw" else float(mean_text)
        for n in (int(x) for x in ns.split(",")):
            res = [kept_vs_topk(w.double(), max(1, int(share * len(w))), n, mean, draws) for w in weights]
            overlap, mass = (sum(r[i] for r in res) / len(res) for i in (0, 1))
            rows.append({"scale": mean_text, "n": n, "topk_overlap": overlap, "topk_mass_kept": mass})
    n_k = len(weights[0])
    console.print(
        table(
            f"reservoir vs top-K: {len(weights)} layers, N_k={n_k} blocks, K={int(share * n_k)}, mean w={1 / n_k:.4f}",
            ["scale", "n", "overlap with top-K", "top-K weight kept"],
            [[r["scale"], r["n"], r["topk_overlap"], r["topk_mass_kept"]] for r in rows],
        )
    )
    write_json(json_out, {"model": model, "tokens": tokens, "share": share, "n_k": n_k, "rows": rows})
