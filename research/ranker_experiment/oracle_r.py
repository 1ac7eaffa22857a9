"""python oracle_r.py OUT.json BUDGET TRACE...: the future-replies oracle with the default's layout (sink one block,
half the budget on the most recent tokens), against the full cache."""

import json
import sys

import common
import torch

from benchmarks.replay_oracle import OracleSession, ReplyAttention
from benchmarks.replay_run import budget_tokens, compare
from kvstore import SessionConfig
from kvstore.models.registry import load_model

torch.set_num_threads(1)
out, budget = sys.argv[1], float(sys.argv[2])
model, tok, info = load_model("smollm2-135m", dtype="bf16")
runs = []
for path in sys.argv[3:]:
    conv, p, ref, record = common.full_reference(model, tok, path, ReplyAttention)
    tokens = budget_tokens(budget, p.tokens)
    cfg = SessionConfig(
        policy="h2o", budget=tokens, cache_options={"recent": 0, "recent_share": 0.5, "sink": 32}, protect="none"
    )
    turns = compare(OracleSession(model, tok, cfg, record, "future"), p, ref)
    runs.append({"conversation": conv.name, "turns": [t.to_dict() for t in turns]})
    n = sum(t.tokens for t in turns)
    print(conv.name, round(sum(t.kl for t in turns) / n, 4), round(sum(t.top1 for t in turns) / n, 4), flush=True)
    json.dump({"runs": runs}, open(out, "w"))
