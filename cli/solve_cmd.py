"""`nexus-agent solve [ID]`: one task end to end (sandbox, agent with a live view, patch, grading, files)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from cli.console import console as make_console
from cli.errors import json_flag
from cli.live import STATUS_STYLE, exit_words, plural, solve_view
from cli.options import run_options
from cli.safe_text import safe_text, say_to
from pipeline.config import DEFAULT_MAX_STEPS, DEFAULT_TASK, RunConfig
from pipeline.errors import RunError
from pipeline.files import TRAJECTORY, check_run_folder, new_run_folder
from pipeline.folder_lock import hold_folder
from pipeline.profiles.learn import learn_after


@run_options(
    "dataset", "model", "policy", "budget", "protocol", "protect", "profile", "sandbox", "max_steps", "seed", "replay",
    "temperature", "threads", "max_new_tokens", "device", "command_timeout", "test_timeout", "repo_cache", "server",
    "api_key", "server_timeout", "learn", "constrain", "call_format",
)  # fmt: skip
def solve_cmd(
    cfg: RunConfig,
    instance_id: str = typer.Argument(
        None, help=f"The task's instance_id (default: the --replay recording's task, else {DEFAULT_TASK})."
    ),
    out: Path = typer.Option(None, "--out", "-o", help="Output folder (default: a new runs/<id>-<time>-<suffix>/)."),
    as_json: bool = json_flag("Print the report (report.json's content) as JSON on stdout; progress goes to stderr."),
    repo: Path = typer.Option(
        None, "--repo", help="Solve an issue in this local git repository (its HEAD commit) instead of a task."
    ),
    issue: str = typer.Option(
        None,
        "--issue",
        help="With --repo: the problem statement, or a file holding it (a name such as issue.md or docs/bug "
        "that does not exist is refused, not taken for the text).",
    ),
    test_cmd: str = typer.Option(
        None, "--test-cmd", help="With --repo: grade by this command's exit code (0 = resolved); default: not graded."
    ),
) -> None:
    """Solve one task: the agent works in a sandbox, its patch is graded, files go to --out.

    Every option is checked before anything starts (a bad one: one line, exit 2, no folder). The memory profile
    shipped for the built-in agent and the model is used (the default, 'builtin'), or the one --memory-profile names
    ('auto': the profile store; 'none'), and none is learned unless --learn-profile is given. On a terminal a live
    table shows each step and what runs now; otherwise (a log file) one line per step."""
    from pipeline.run import preflight  # lazy: urllib, off --help

    console = make_console(stderr=as_json)  # with --json, stdout carries the report alone
    recorded = _recorded_task(cfg.replay)  # --replay read and checked with the other options: before any folder
    with _task(console, cfg, instance_id, recorded, repo, issue, test_cmd) as (task, cfg):
        if out is not None:
            check_run_folder(out)  # another tool's files there: one line, before anything starts
        preflight(cfg, [task])  # after the task: a bad id is answered without importing torch
        out = out or new_run_folder(Path("runs"), task.instance_id)
        with hold_folder(out):  # another run on --out: one line, before anything starts
            report, learned = _solve(console, task, cfg, out)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    print_summary(console, report, out, cfg.lacks_profile and learned is None)
    if learned:
        console.print(safe_text("  " + learned))


@contextmanager
def _task(
    console: Console, cfg: RunConfig, instance_id, recorded, repo: Path | None, issue: str | None, test_cmd: str | None
):
    """The task to solve and the config to run it with: a task by id (the one given, else the --replay recording's
    `recorded`), or the user's --repo and --issue (whose sandboxes check out the repo's HEAD from a private repo
    cache, pipeline.own_repo)."""
    if repo is None:
        if issue is not None or test_cmd is not None:
            raise RunError("--issue and --test-cmd go with --repo")
        from tasks import get_task  # lazy: urllib, off --help

        task = get_task(instance_id or recorded or DEFAULT_TASK, cfg.dataset)
        if recorded and task.instance_id != recorded:
            raise RunError(f"--replay {cfg.replay} records task {recorded}, not {task.instance_id}")
        yield task, cfg
        return
    if instance_id is not None or cfg.dataset is not None or issue is None:
        raise RunError("--repo takes an --issue (text or file) and no task id or --dataset")
    from pipeline.own_repo import OwnRepo, own_task  # lazy: docker, pyarrow, off --help

    with own_task(OwnRepo(repo, issue, test_cmd), cfg) as (task, own_cfg, note):
        if note:
            console.print(safe_text(note, "yellow"))
        yield task, own_cfg


def _solve(console: Console, task, cfg: RunConfig, out: Path) -> tuple[dict[str, Any], str | None]:
    """The run with its live view, then the memory profile it may teach; the report and what was learned."""
    console.print(
        Text.assemble(safe_text(task.instance_id, "bold"), safe_text(f" ({task.source or 'builtin'}) -> {out}"))
    )
    finished: list = []
    report = _run_live(console, task, cfg, out, finished.append)
    console.print()
    learned = _learn(console, cfg, finished[0], out, task.problem_statement) if finished else None
    return report, learned


def _run_live(console: Console, task, cfg: RunConfig, out: Path, on_finish) -> dict[str, Any]:
    from pipeline.backends import describe_model  # lazy: torch, transformers, off --help
    from pipeline.run import run_task  # lazy: urllib, off --help

    label = describe_model(cfg)
    steps = cfg.max_steps or (None if cfg.replaying else DEFAULT_MAX_STEPS)
    with solve_view(console, f"{task.instance_id}: {label}", steps) as view:
        report = run_task(
            task, cfg, out, on_step=view.on_step, on_token=view.on_token, on_finish=on_finish, on_event=view.on_event
        )
    return report


def _learn(console: Console, cfg: RunConfig, backend, out: Path, statement: str) -> str | None:
    """Learn a memory profile from this run when it may teach one (pipeline.profiles.learn); `statement`: the issue."""

    if not (cfg.learns or cfg.teaches_server):
        return None
    session = getattr(backend, "session", None)  # a local model's session; none for a server or a replay
    served = (cfg.server_model, cfg.api_key)
    return learn_after(
        out / TRAJECTORY, statement, say_to(console), console.status, session=session, server=cfg.server, served=served
    )


def print_summary(
    console: Console, report: dict[str, Any], out: Path | None = None, lacks_profile: bool = False
) -> None:
    """The verdict, the episode, per-turn cache stats and totals."""
    from kvstore.session.session import TurnStats  # lazy: torch, transformers, off --help

    status = report["status"]
    style = STATUS_STYLE.get(status, "white")
    how = (
        f" | {exit_words(report['exit_reason'])} after {plural(report['steps'], 'step')} | patch "
        f"{plural(report['patch_lines'], 'line')} | agent {report['agent_s']:.1f} s, grading "
        f"{report['grade_s']:.1f} s, wall {report['wall_s']:.1f} s"
    )
    shown = "not graded" if status == "not_graded" else status  # solve --repo without --test-cmd
    console.print(
        Text.assemble(safe_text(report["instance_id"], "bold"), ": ", safe_text(shown, style), safe_text(how))
    )
    budget = (report.get("config") or {}).get("budget")
    over = False
    for turn in report["turns"]:
        stats = TurnStats.from_dict(turn)
        if stats is not None:
            console.print(safe_text("  " + stats.summary()))
            over = over or (isinstance(budget, int) and (turn.get("held_tokens") or 0) > budget)
    if over:
        console.print(
            safe_text(
                f"  (the cache may hold a little more than the budget of {budget} tokens: eviction works in blocks, "
                "so up to a block of new tokens waits beside the budget until the next eviction)"
            )
        )
    t = report["totals"]
    console.print(
        f"  totals: prefilled {t['prefill_tokens']} tok, generated {t['generated_tokens']} tok, evicted "
        f"{t['evicted_tokens']} tok/layer, peak cache {t['peak_held_tokens']} tok/layer "
        f"({t['peak_held_bytes'] / 2**20:.1f} MiB); prefill {t['prefill_s']:.1f} s, decode {t['decode_s']:.1f} s, "
        f"evict {t['evict_s']:.2f} s",
        highlight=False,
    )
    memory = _memory_line(report, lacks_profile)
    if memory:
        console.print(safe_text("  " + memory))
    if report["grade"].get("error"):  # it can quote the tests' output
        console.print(safe_text(f"  grading: {report['grade']['error']}", "red"))
    if out is not None:
        console.print(safe_text(f"  files: {out}/trajectory.jsonl, patch.diff, report.json"))


def _memory_line(report: dict[str, Any], lacks_profile: bool) -> str | None:
    """What the memory profile did for this run; for the default memory without one, how to get one."""
    said = [t["memory_profile"] for t in report["turns"] if t.get("memory_profile")]
    if said:
        return f"memory profile: {said[0]}"
    if lacks_profile and report["turns"]:
        return (
            "memory profile: none (the default); a run with --learn-profile (or `nexus-agent calibrate` on this "
            "run's folder) learns one, which runs with --memory-profile auto use (docs/memory.md)"
        )
    return None


def _recorded_task(replay: Path | None) -> str | None:
    """The task --replay's recording ran (None without one); AgentError, one line, for a file a replay cannot run."""
    if replay is None:
        return None
    from agent.backends.replay import load_recording  # lazy: off --help

    return load_recording(replay).header.get("task_id")
