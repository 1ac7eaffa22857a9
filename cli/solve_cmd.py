"""`nexus-agent solve [ID]`: one task end to end (sandbox, agent with a live view, patch, grading, files)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pipeline.config import DEFAULT_MAX_STEPS, DEFAULT_TASK, RunConfig

_STYLE = {"resolved": "green", "unresolved": "yellow", "empty_patch": "yellow", "patch_failed": "red", "error": "red"}


def solve_cmd(
    instance_id: str = typer.Argument(
        None, help=f"The task's instance_id (default: the --replay recording's task, else {DEFAULT_TASK})."
    ),
    dataset: str = typer.Option(None, "--dataset", "-d", help="Task source (default: the built-in tasks)."),
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Registry name, local model dir or hub id."),
    policy: str = typer.Option("nexus", "--policy", help="KV eviction policy (nexus, snapkv, full, ...)."),
    budget: str = typer.Option("2048", "--budget", help="Cache budget: tokens per layer, a density, or 'none'."),
    protocol: str = typer.Option("true-eviction", "--protocol", help="true-eviction or re-prefill."),
    sandbox: str = typer.Option("auto", "--sandbox", "-s", help="auto, docker, bwrap, or local (no isolation)."),
    max_steps: int = typer.Option(None, "--max-steps", help="Step limit (default 5; a replay: the recording's)."),
    seed: int = typer.Option(0, "--seed", help="Seed of sampling and of the cache."),
    out: Path = typer.Option(None, "--out", "-o", help="Output folder (default runs/<id>-<timestamp>/)."),
    replay: Path = typer.Option(None, "--replay", help="Replay this recorded trajectory instead of a model."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (0 = greedy)."),
    threads: int = typer.Option(None, "--threads", help="Torch CPU threads (default: cores/workers; 1 if busy)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="Most tokens in one reply."),
    device: str = typer.Option(None, "--device", help="Torch device (default: CUDA when present, else CPU)."),
) -> None:
    """Solve one task: the agent works in a sandbox, its patch is graded, files go to --out."""
    from pipeline.config import parse_budget
    from tasks import get_task

    cfg = RunConfig(
        dataset=dataset, model=model, policy=policy, budget=parse_budget(budget), protocol=protocol,
        sandbox=sandbox, max_steps=max_steps, seed=seed, temperature=temperature, max_new_tokens=max_new_tokens,
        replay=replay, device=device, threads=threads,
    )  # fmt: skip
    task = get_task(instance_id or _recorded_task(replay) or DEFAULT_TASK, dataset)
    out = out or Path("runs") / f"{_safe(task.instance_id)}-{time.strftime('%Y%m%d-%H%M%S')}"
    console = Console()
    console.print(f"[bold]{task.instance_id}[/bold] ({task.source or 'builtin'}) -> {out}")
    report = _run_live(console, task, cfg, out)
    console.print()
    print_summary(console, report, out)


def _run_live(console: Console, task, cfg: RunConfig, out: Path) -> dict[str, Any]:
    from cli.live import SolveView
    from pipeline.run import run_task

    label = "replay" if cfg.replaying else f"{cfg.model} ({cfg.policy}, budget {cfg.budget}, {cfg.protocol})"
    steps = cfg.max_steps or (None if cfg.replaying else DEFAULT_MAX_STEPS)
    with SolveView(console, f"{task.instance_id}: {label}", steps) as view:
        report = run_task(task, cfg, out, on_step=view.on_step, on_token=view.on_token)
    return report


def print_summary(console: Console, report: dict[str, Any], out: Path | None = None) -> None:
    """The verdict, the episode, per-turn cache stats and totals."""
    from kvstore.session import TurnStats

    status = report["status"]
    style = _STYLE.get(status, "white")
    console.print(
        f"[bold]{report['instance_id']}[/bold]: [{style}]{status}[/{style}] | exit {report['exit_reason']} after "
        f"{report['steps']} steps | patch {report['patch_lines']} lines | agent {report['agent_s']:.1f} s, "
        f"grading {report['grade_s']:.1f} s, wall {report['wall_s']:.1f} s"
    )
    fields = set(TurnStats.__dataclass_fields__)
    for turn in report["turns"]:
        if fields <= set(turn):
            console.print("  " + TurnStats(**{k: turn[k] for k in fields}).summary(), highlight=False)
    t = report["totals"]
    console.print(
        f"  totals: prefilled {t['prefill_tokens']} tok, generated {t['generated_tokens']} tok, evicted "
        f"{t['evicted_tokens']} tok/layer, peak cache {t['peak_held_tokens']} tok/layer "
        f"({t['peak_held_bytes'] / 2**20:.1f} MiB); prefill {t['prefill_s']:.1f} s, decode {t['decode_s']:.1f} s, "
        f"evict {t['evict_s']:.2f} s",
        highlight=False,
    )
    if report["grade"].get("error"):
        console.print(f"  grading: {report['grade']['error']}", style="red", highlight=False)
    if out is not None:
        console.print(f"  files: {out}/trajectory.jsonl, patch.diff, report.json", highlight=False)


def _recorded_task(replay: Path | None) -> str | None:
    if replay is None:
        return None
    from agent.trajectory import load_trajectory

    return load_trajectory(replay).header.get("task_id")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
