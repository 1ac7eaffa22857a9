"""report.json of one run: the verdict, the episode, per-turn cache statistics and their totals, the config."""

from __future__ import annotations

from typing import Any

from agent.loop import AgentResult
from pipeline.config import RunConfig
from tasks.schema import Task


def build_report(
    task: Task, cfg: RunConfig, model_name: str, result: AgentResult, graded, wall_s: float, served: dict | None = None
) -> dict:
    """report.json: the verdict, the episode, per-turn cache stats and their totals, the config.

    `served`: under --server, the settings the server reports (they label the run; `config` is the client's)."""
    turns = [r["stats"] | {"step": r["step"], "tool": (r["call"] or {}).get("name")} for r in result.step_records]
    return {
        "instance_id": task.instance_id,
        "model_name_or_path": cfg.model_label(served),
        "model": model_name,
        "status": graded.status,
        "resolved": graded.resolved,
        "exit_reason": result.exit_reason,
        "steps": result.steps,
        "agent_s": round(result.elapsed_s, 2),
        "grade_s": graded.duration_s,
        "wall_s": round(wall_s, 2),
        "patch_lines": len(result.patch.splitlines()),
        "totals": turn_totals(turns),
        "turns": turns,
        "grade": graded.to_dict(),
        "config": cfg.to_dict(),
        **({"server": served} if served is not None else {}),
    }


def turn_totals(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums over the turns (peaks for what the cache held); zeros for backends without cache statistics."""

    def total(key: str) -> float:
        return sum(t.get(key) or 0 for t in turns)

    return {
        "prefill_tokens": int(total("prefill_tokens")),
        "generated_tokens": int(total("generated_tokens")),
        "evicted_tokens": int(total("evicted_tokens")),
        "peak_held_tokens": max((t.get("held_tokens") or 0 for t in turns), default=0),
        "peak_held_bytes": max((t.get("held_bytes") or 0 for t in turns), default=0),
        "prefill_s": round(total("prefill_s"), 3),
        "decode_s": round(total("decode_s"), 3),
        "evict_s": round(total("evict_s"), 3),
    }
