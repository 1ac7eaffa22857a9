"""Rich live views: one task's steps as they happen (`solve`), and a batch's progress (`eval`)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
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


TAIL_LINES = 4  # how many lines of the latest step's output the solve view shows under its table

# exit reasons (agent.loop, R2E-Gym's names) in the words the summary uses
EXIT_WORDS = {
    "agent": "submitted",
    "max_step_limit": "submitted after the step limit",
    "abs_step_limit": "step limit reached",
    "token_limit": "context full (token limit)",
    "traj_time_limit": "time limit reached",
    "disk_limit": "disk budget exceeded",
    "error": "error",
    "interrupted": "interrupted",
}


def exit_words(reason: str | None) -> str:
    return EXIT_WORDS.get(reason or "", reason or "-")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _kib(n: int | float | None) -> str:
    return f"{(n or 0) / 2**20:.1f} MiB"


def call_text(tool: str, params: dict[str, Any] | None, width: int = 60) -> str:
    """A tool call as one short line: the tool and its command (bash), sub-command and path, or first argument."""
    params = params or {}
    if "cmd" in params:
        detail = str(params["cmd"])
    else:
        detail = " ".join(str(params[k]) for k in ("command", "path", "search_term") if params.get(k))
    detail = " ".join(detail.split())
    if len(detail) > width:
        detail = detail[: width - 1] + "…"
    return f"{tool}: {detail}" if detail else tool


def env_words(ev: dict[str, Any]) -> str:
    """A Python env build event ("env_build", "env_built": swe_env.pyenv) in words."""
    what = " ".join(str(x) for x in (ev.get("repo"), ev.get("version")) if x)
    if ev.get("kind") == "env_built" or ev.get("phase") == "env_built":
        return f"the Python environment for {what} built in {ev.get('seconds', 0):.0f} s; opening the sandbox"
    return f"building the Python environment for {what} (first use; cached afterwards)"


class TaskNow:
    """What one task is doing now, from run_task's events, its tokens and its steps; `line()` says it in words."""

    def __init__(self, max_steps: int | None) -> None:
        self.max_steps = max_steps
        self.phase, self.detail, self.step = "opening the sandbox", "", 0
        self.since = self.start = time.monotonic()
        self.session = None  # a local model's session: its prefill progress is read while the model reads
        self.chars = 0  # characters of the reply written so far

    def event(self, ev: dict[str, Any]) -> None:
        kind = ev["kind"]
        if kind == "backend":
            self.session = getattr(ev["backend"], "session", None)
            self._to("starting the agent")
        elif kind == "model":
            self.step, self.chars = ev["step"], 0
            self._to("model")
        elif kind == "tool":
            self._to("tool", call_text(ev["tool"], ev.get("params")))
        elif kind == "loading":
            self._to("loading the model")
        elif kind == "grading":
            self._to(f"grading the patch ({ev['tests']})" if ev.get("tests") else "grading the patch")
        elif kind == "sandbox":
            self._to(f"opening the sandbox ({ev.get('backend')})")
        elif kind in ("env_build", "env_built"):
            self._to(env_words(ev))

    def token(self, piece: str) -> None:
        self.chars += len(piece)

    def _to(self, phase: str, detail: str = "") -> None:
        self.phase, self.detail, self.since = phase, detail, time.monotonic()

    def line(self) -> str:
        now = time.monotonic()
        if self.phase == "model":
            what = f"{self.step_text()}: {self._model()}"
        elif self.phase == "tool":
            what = f"{self.step_text()}: running {self.detail}"
        else:
            what = self.phase
        return f"{what}, {now - self.since:.0f} s so far | {now - self.start:.0f} s elapsed"

    def step_text(self) -> str:
        return f"step {self.step}/{self.max_steps}" if self.max_steps else f"step {self.step}"

    def _model(self) -> str:
        from pipeline.executors.progress import model_progress  # lazy: torch, transformers, off --help

        if self.chars:
            return f"the model writes its reply ({plural(self.chars, 'character')} so far)"
        now = model_progress(self.session) or {}
        if "prefill" in now:
            return f"the model reads the conversation (prefill {now['prefill'][0]}/{now['prefill'][1]} tokens)"
        if now.get("decoded"):
            return f"the model writes its reply ({plural(now['decoded'], 'token')} so far)"
        return "the model works on its reply" if self.session is not None else "waiting for the model's reply"


class SolveView:
    """Steps so far (tool, tokens, cache held/evicted, times) and what the task is doing now (refreshed 4 times a
    second: the running tool with its command and time, the prefill's tokens, the reply being written)."""

    def __init__(self, console: Console, title: str, max_steps: int | None) -> None:
        self.console, self.title, self.max_steps = console, title, max_steps
        self.rows: list[dict[str, Any]] = []
        self.now = TaskNow(max_steps)
        self.final = False
        self.live = Live(console=console, refresh_per_second=4, transient=False, get_renderable=self._current)

    def __enter__(self) -> SolveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.final = True
        self.live.__exit__(*exc)

    def on_event(self, ev: dict[str, Any]) -> None:
        self.now.event(ev)

    def on_token(self, piece: str) -> None:
        self.now.token(piece)

    def on_step(self, rec: dict[str, Any]) -> None:
        self.rows.append(rec)

    def _current(self) -> Group:
        return Group(self.render(self.final), self.tail())

    def render(self, final: bool = False) -> Table:
        table = Table(title=safe_text(self.title), title_justify="left", expand=False)
        for col in ("step", "call", "exit", "generated", "context", "cache held", "evicted", "model s", "tool s"):
            if col == "call":  # one line each: call_text cuts it, the table never folds it
                table.add_column(col, no_wrap=True, overflow="ellipsis")
            else:
                table.add_column(col, justify="right")
        for rec in self.rows[-12:]:
            s = rec.get("stats") or {}
            table.add_row(
                str(rec["step"]), safe_text(_call_of(rec)), safe_text(_exit_code(rec["observation"])),
                str(s.get("generated_tokens", "-")),
                str(rec.get("context_tokens", "-")), _held(s),
                str(s.get("evicted_tokens", "-")), f"{rec['model_s']:.1f}", f"{rec['env_s']:.1f}",
            )  # fmt: skip
        elapsed = time.monotonic() - self.now.start
        table.caption = safe_text(f"done | {elapsed:.0f} s elapsed" if final else self.now.line())
        return table

    def tail(self) -> Text:
        """The last lines of the latest step's output, under the table."""
        if not self.rows:
            return Text("")
        rec = self.rows[-1]
        width = max(20, self.console.width - 4)
        lines = output_tail(rec.get("observation") or "", width=width)
        text = Text(f"output of step {rec['step']} (last {plural(len(lines), 'line')}):\n", style="bold")
        text.append(safe_text("\n".join(f"  {line}" for line in lines) or "  (none)", style="dim"))
        return text


class PlainSolveView:
    """The same run as plain lines, for output that is not a terminal (a log file, CI): one line per step, and one
    when the sandbox opens, the model is ready and grading starts."""

    def __init__(self, console: Console, title: str, max_steps: int | None) -> None:
        self.console, self.max_steps = console, max_steps
        self.now = TaskNow(max_steps)
        self.say(title)

    def __enter__(self) -> PlainSolveView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def say(self, line: str) -> None:
        self.console.print(safe_text(line), soft_wrap=True)
        self.console.file.flush()

    def on_event(self, ev: dict[str, Any]) -> None:
        self.now.event(ev)
        if ev["kind"] in ("sandbox", "env_build", "env_built", "loading", "grading"):
            self.say(self.now.phase)
        elif ev["kind"] == "backend":
            self.say(f"agent ready ({time.monotonic() - self.now.start:.0f} s elapsed)")

    def on_token(self, piece: str) -> None:
        self.now.token(piece)

    def on_step(self, rec: dict[str, Any]) -> None:
        s = rec.get("stats") or {}
        call = rec.get("call") or {}
        tool = call_text(call["name"], call.get("params")) if call else "no valid tool call"
        code = _exit_code(rec["observation"])
        parts = [f"{self.now.step_text()}: {tool}" + (f" -> exit {code}" if code else "")]
        parts.append(f"model {rec['model_s']:.1f} s, tool {rec['env_s']:.1f} s")
        if "generated_tokens" in s:
            parts.append(f"generated {s['generated_tokens']} tok, context {rec.get('context_tokens', '-')} tok")
        if "held_tokens" in s:
            parts.append(f"cache held {_held(s)}, evicted {s.get('evicted_tokens', 0)}")
        parts.append(f"{time.monotonic() - self.now.start:.0f} s elapsed")
        self.say(" | ".join(parts))

    def render(self, final: bool = False) -> Text:
        return Text("")


def solve_view(console: Console, title: str, max_steps: int | None) -> SolveView | PlainSolveView:
    """The live table on a terminal, plain lines otherwise."""
    return SolveView(console, title, max_steps) if console.is_terminal else PlainSolveView(console, title, max_steps)


def _held(stats: dict[str, Any]) -> str:
    if "held_tokens" not in stats:
        return "-"
    return f"{stats['held_tokens']} ({_kib(stats.get('held_bytes'))})"


def _call_of(rec: dict[str, Any]) -> str:
    """A step's call as the table shows it: the tool and its command or arguments (`call_text`), "-" for none."""
    call = rec.get("call") or {}
    return call_text(call["name"], call.get("params"), 48) if call.get("name") else tool_of(rec)


def output_tail(observation: str, lines: int = TAIL_LINES, width: int = 140) -> list[str]:
    """The last `lines` non-blank lines of a step's output, each cut to `width` characters."""
    kept = [line.rstrip() for line in (observation or "").splitlines() if line.strip()][-lines:]
    return [line if len(line) <= width else line[: width - 1] + "…" for line in kept]


def _exit_code(observation: str) -> str:
    first = observation.splitlines()[0] if observation else ""
    return first.removeprefix("Exit code: ") if first.startswith("Exit code: ") else ""


class EvalView:
    """done/total with ETA, resolved so far, token and cache totals, and one row per worker (what it does now and for
    how long, refreshed 4 times a second); on output that is not a terminal, a line per task started and ended."""

    def __init__(self, console: Console, total: int, already_done: int = 0, workers: int = 1) -> None:
        self.console, self.total, self.done, self.workers_at_once = console, total, already_done, workers
        self.plain = not console.is_terminal
        self.progress = Progress(
            TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"), console=console,
        )  # fmt: skip
        self.durations: list[float] = []  # wall seconds of the tasks finished in this run (the ETA's measure)
        self.bar = self.progress.add_task("eval", total=total, completed=already_done, eta=self.eta())
        self.workers: dict[str, dict[str, Any]] = {}
        self.resolved = self.finished = self.errors = 0
        self.totals = {"generated_tokens": 0, "prefill_tokens": 0, "evicted_tokens": 0, "peak_held_tokens": 0}
        self.live = Live(console=console, refresh_per_second=4, get_renderable=self.render)

    def __enter__(self) -> EvalView:
        if not self.plain:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.plain:
            self.live.__exit__(*exc)

    def _say(self, line: str) -> None:
        self.console.print(safe_text(line), soft_wrap=True)
        self.console.file.flush()

    def event(self, ev: dict[str, Any]) -> None:
        """A worker's event: {"kind": start|phase|step|done, "worker", "instance_id", ...} (pipeline.executors)."""
        row = self.workers.setdefault(str(ev["worker"]), {})
        now = time.monotonic()
        if ev["kind"] == "start":
            row.update(instance=ev["instance_id"], step=0, doing="opening the sandbox", held=0, evicted=0, t0=now)
            if self.plain:
                self._say(f"started {ev['instance_id']} (worker {ev['worker']})")
        elif ev["kind"] == "phase":
            row.update(step=ev.get("step", row.get("step", 0)), doing=_phase_words(ev), since=now)
            if self.plain and ev.get("phase") in ("env_build", "env_built"):
                self._say(f"{ev['instance_id']} (worker {ev['worker']}): {row['doing']}")
        elif ev["kind"] == "step":
            row.update(step=ev["step"], doing=f"{ev['tool']} done", held=ev.get("held_tokens", 0), since=now)
            row["evicted"] = row.get("evicted", 0) + (ev.get("evicted_tokens") or 0)
        elif ev["kind"] == "done":
            row.update(doing=f"done: {ev.get('status')}", since=now)

    def eta(self) -> str:
        """The batch's ETA in words (pipeline.executors.progress.eta_seconds)."""
        from pipeline.executors.progress import eta_seconds  # lazy: torch, transformers, off --help

        seconds = eta_seconds(self.durations, self.total - self.done, self.workers_at_once)
        if seconds is None:
            return "ETA after the first task"
        minutes, secs = divmod(round(seconds), 60)
        return f"ETA {minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"ETA {minutes}:{secs:02d}"

    def finished_one(self, report: dict[str, Any]) -> None:
        if report.get("status") != "error":  # a task whose run failed is not done: the next run retries it
            self.progress.advance(self.bar)
            self.done += 1
        if report.get("wall_s") is not None:
            self.durations.append(float(report["wall_s"]))
        self.progress.update(self.bar, eta=self.eta())
        self.finished += 1
        if self.plain:
            how = report.get("error") if report.get("status") == "error" else exit_words(report.get("exit_reason"))
            said = f"{self.done}/{self.total} finished | {report['instance_id']}: {report.get('status')} ({how})"
            self._say(f"{said} | {self.eta()}")
        self.resolved += bool(report.get("resolved"))
        self.errors += report.get("status") == "error"
        totals = report.get("totals") or {}
        for key in ("generated_tokens", "prefill_tokens", "evicted_tokens"):
            self.totals[key] += totals.get(key, 0)
        self.totals["peak_held_tokens"] = max(self.totals["peak_held_tokens"], totals.get("peak_held_tokens", 0))

    def render(self) -> Group:
        t = self.totals
        line = Text(
            f"resolved {self.resolved}/{self.finished} this run, errors {self.errors} | generated "
            f"{t['generated_tokens']} tok, prefilled {t['prefill_tokens']} tok, evicted {t['evicted_tokens']} "
            f"tok/layer, peak cache {t['peak_held_tokens']} tok/layer"
        )
        table = Table("worker", "instance", "step", "doing now", "for", "cache held", "evicted", "task time")
        now = time.monotonic()
        for name, row in sorted(self.workers.items()):
            if "instance" in row:
                age, since = f"{now - row['t0']:.0f} s", f"{now - row.get('since', row['t0']):.0f} s"
                instance, doing = safe_text(row["instance"]), safe_text(row["doing"])
                table.add_row(
                    safe_text(name),
                    instance,
                    str(row["step"]),
                    doing,
                    since,
                    str(row["held"]),
                    str(row["evicted"]),
                    age,
                )
        return Group(self.progress, line, table)


def _phase_words(ev: dict[str, Any]) -> str:
    """A worker's phase event in words (the model's work, the running tool with its command, grading)."""
    phase = ev.get("phase")
    if phase == "model" and ev.get("prefill"):
        done, total = ev["prefill"]
        return f"the model reads the conversation (prefill {done}/{total} tokens)"
    if phase == "model" and ev.get("decoded") is not None:
        return f"the model writes its reply ({plural(ev['decoded'], 'token')} so far)"
    if phase == "tool":
        return "running " + call_text(ev.get("tool") or "-", ev.get("params"), 40)
    if phase in ("env_build", "env_built"):
        return env_words(ev)
    return {
        "model": "the model reads the conversation and replies",
        "loading": "loading the model",
        "backend": "starting the agent",
        "sandbox": "opening the sandbox",
        "grading": "grading the patch",
    }.get(phase or "", str(phase))
