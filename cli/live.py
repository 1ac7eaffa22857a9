"""Rich live views: one task's steps as they happen (`solve`), and a batch's progress (`eval`)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from agent.trajectory import tool_of
from cli.safe_text import safe_text

# how a grading verdict is coloured wherever it is shown
STATUS_STYLE = {
    "resolved": "green",
    "unresolved": "yellow",
    "empty_patch": "yellow",
    "patch_failed": "red",
    "error": "red",
}


def _kib(n: int | float | None) -> str:
    return f"{(n or 0) / 2**20:.1f} MiB"


class SolveView:
    """Steps so far (tool, tokens, cache held/evicted, times) and the step being generated."""

    def __init__(self, console: Console, title: str, max_steps: int | None) -> None:
        self.console, self.title, self.max_steps = console, title, max_steps
        self.rows: list[dict[str, Any]] = []
        self.streamed = 0  # text pieces decoded in the current reply
        self.start = time.monotonic()
        self.live = Live(self.render(), console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> SolveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self.render(final=True))
        self.live.__exit__(*exc)

    def on_token(self, piece: str) -> None:
        self.streamed += 1
        self.live.update(self.render())

    def on_step(self, rec: dict[str, Any]) -> None:
        self.rows.append(rec)
        self.streamed = 0
        self.live.update(self.render())

    def render(self, final: bool = False) -> Table:
        table = Table(title=safe_text(self.title), title_justify="left", expand=False)
        for col in ("step", "tool", "exit", "generated", "context", "cache held", "evicted", "model s", "tool s"):
            table.add_column(col, justify="left" if col == "tool" else "right")
        for rec in self.rows[-12:]:
            s = rec.get("stats") or {}
            table.add_row(
                str(rec["step"]), safe_text(tool_of(rec)), safe_text(_exit_code(rec["observation"])),
                str(s.get("generated_tokens", "-")),
                str(rec.get("context_tokens", "-")), _held(s),
                str(s.get("evicted_tokens", "-")), f"{rec['model_s']:.1f}", f"{rec['env_s']:.1f}",
            )  # fmt: skip
        elapsed = time.monotonic() - self.start
        of = f"/{self.max_steps}" if self.max_steps else ""
        state = "done" if final else f"step {len(self.rows) + 1}{of}: generating ({self.streamed} pieces)"
        table.caption = f"{state} | {elapsed:.0f} s elapsed"
        return table


def _held(stats: dict[str, Any]) -> str:
    if "held_tokens" not in stats:
        return "-"
    return f"{stats['held_tokens']} ({_kib(stats.get('held_bytes'))})"


def _exit_code(observation: str) -> str:
    first = observation.splitlines()[0] if observation else ""
    return first.removeprefix("Exit code: ") if first.startswith("Exit code: ") else ""


class EvalView:
    """done/total with ETA, resolved so far, token and cache totals, and one row per worker."""

    def __init__(self, console: Console, total: int, already_done: int = 0) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=console,
        )  # fmt: skip
        self.bar = self.progress.add_task("eval", total=total, completed=already_done)
        self.workers: dict[str, dict[str, Any]] = {}
        self.resolved = self.finished = self.errors = 0
        self.totals = {"generated_tokens": 0, "prefill_tokens": 0, "evicted_tokens": 0, "peak_held_tokens": 0}
        self.live = Live(self.render(), console=console, refresh_per_second=4)

    def __enter__(self) -> EvalView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self.render())
        self.live.__exit__(*exc)

    def event(self, ev: dict[str, Any]) -> None:
        """A worker's event: {"kind": start|step|done, "worker", "instance_id", ...}."""
        row = self.workers.setdefault(str(ev["worker"]), {})
        if ev["kind"] == "start":
            row.update(instance=ev["instance_id"], step=0, tool="starting", held=0, evicted=0, t0=time.monotonic())
        elif ev["kind"] == "step":
            row.update(step=ev["step"], tool=ev["tool"], held=ev.get("held_tokens", 0))
            row["evicted"] = row.get("evicted", 0) + (ev.get("evicted_tokens") or 0)
        elif ev["kind"] == "done":
            row.update(tool=f"done: {ev.get('status')}")
        self.live.update(self.render())

    def finished_one(self, report: dict[str, Any]) -> None:
        self.progress.advance(self.bar)
        self.finished += 1
        self.resolved += bool(report.get("resolved"))
        self.errors += report.get("status") == "error"
        totals = report.get("totals") or {}
        for key in ("generated_tokens", "prefill_tokens", "evicted_tokens"):
            self.totals[key] += totals.get(key, 0)
        self.totals["peak_held_tokens"] = max(self.totals["peak_held_tokens"], totals.get("peak_held_tokens", 0))
        self.live.update(self.render())

    def render(self) -> Group:
        t = self.totals
        line = Text(
            f"resolved {self.resolved}/{self.finished} this run, errors {self.errors} | generated "
            f"{t['generated_tokens']} tok, prefilled {t['prefill_tokens']} tok, evicted {t['evicted_tokens']} "
            f"tok/layer, peak cache {t['peak_held_tokens']} tok/layer"
        )
        table = Table("worker", "instance", "step", "tool", "cache held", "evicted", "time", title_justify="left")
        for name, row in sorted(self.workers.items()):
            if "instance" in row:
                age = f"{time.monotonic() - row['t0']:.0f} s"
                instance, tool = safe_text(row["instance"]), safe_text(row["tool"])
                table.add_row(
                    safe_text(name), instance, str(row["step"]), tool, str(row["held"]), str(row["evicted"]), age
                )
        return Group(self.progress, line, table)
