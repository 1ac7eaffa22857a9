"""Trajectories as JSONL, written as the run goes: a header, one record per step, a footer per episode.

Records (one JSON object per line, field "type"):
- header: format version, task id, model name, agent config, free-form meta ("call_format": xml or tools).
- step: "step" (1-based), "input" (the messages sent to the model this turn), "reply" (the assistant text,
  verbatim), "tool_calls" (only when the server sent native ones: [{id, name, arguments}]), "call" ({name, params} or
  null), "observation" (what the tool produced, with the step line),
  "submitted", "stats" (the backend's per-turn stats), "context_tokens", "model_s", "env_s".
- footer: "exit_reason", "patch", "steps", "elapsed_s", and "error" when the run crashed.
A crash loses at most the step in progress; a truncated last line is skipped on reading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.calls import assistant_message
from agent.errors import AgentError

FORMAT_VERSION = 1


class TrajectoryWriter:
    """Appends records to a JSONL file, flushing each one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a lone surrogate (from a replay file or a tool) is written as its JSON escape, which reads back unchanged
        self._fh = self.path.open("a", encoding="utf-8", errors="backslashreplace")

    def write(self, kind: str, **record: Any) -> None:
        self._fh.write(json.dumps({"type": kind, **record}, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def header(self, task_id: str, model: str, config: dict[str, Any], **meta: Any) -> None:
        self.write("header", version=FORMAT_VERSION, task_id=task_id, model=model, config=config, meta=meta)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Trajectory:
    """A trajectory read back from disk."""

    header: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    footers: list[dict[str, Any]] = field(default_factory=list)  # one per episode (chat has several)
    truncated: bool = False  # the last line was cut (the writer crashed mid-record)

    @property
    def footer(self) -> dict[str, Any] | None:
        return self.footers[-1] if self.footers else None

    @property
    def exit_reason(self) -> str | None:
        return self.footer.get("exit_reason") if self.footer else None

    @property
    def patch(self) -> str | None:
        return self.footer.get("patch") if self.footer else None

    def replies(self) -> list[str]:
        """The assistant messages, in order."""
        return [s["reply"] for s in self.steps]

    def messages(self) -> list[dict[str, str]]:
        """The conversation as the model saw it: each step's input messages, then its reply."""
        out: list[dict[str, str]] = []
        for s in self.steps:
            out.extend(s.get("input", []))
            out.append(assistant_message(s["reply"], s.get("tool_calls") or []))
        return out

    def to_json(self) -> dict[str, Any]:
        """One JSON document: header, messages, steps, footers."""
        return {"header": self.header, "messages": self.messages(), "steps": self.steps, "footers": self.footers}

    def save_json(self, path: str | Path) -> None:
        """Write `to_json()` as one indented JSON file."""
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"
        Path(path).write_text(text, encoding="utf-8", errors="backslashreplace")


def load_trajectory(path: str | Path) -> Trajectory:
    """Read a trajectory JSONL file; a truncated last line is skipped, any other bad line is an AgentError."""
    path = Path(path)
    if path.is_dir():
        raise AgentError(f"{path} is a folder, not a trajectory file (give the .jsonl file)")
    if not path.is_file():
        raise AgentError(f"trajectory file not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise AgentError(f"{path} is not UTF-8 text (byte {exc.start}); a trajectory is JSON lines in UTF-8") from None
    except OSError as exc:
        raise AgentError(f"cannot read trajectory {path}: {exc.strerror}") from None
    traj = Trajectory()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if n == len(lines):
                traj.truncated = True
                break
            raise AgentError(f"{path}:{n}: not a JSON record") from None
        _add(traj, rec, f"{path}:{n}")
    return traj


def _add(traj: Trajectory, rec: Any, where: str) -> None:
    kind = rec.get("type") if isinstance(rec, dict) else None
    if kind == "header":
        traj.header = rec
    elif kind == "step":
        if not isinstance(rec.get("reply"), str):
            raise AgentError(f"{where}: a step record needs a 'reply' string")
        traj.steps.append(rec)
    elif kind == "footer":
        traj.footers.append(rec)
    elif not isinstance(rec, dict):
        raise AgentError(f"{where}: not a trajectory record (a JSON object whose type is header, step or footer)")
    else:
        raise AgentError(f"{where}: unknown record type {kind!r} (expected header, step or footer)")


def tool_of(rec: dict[str, Any]) -> str:
    """The tool a step called ("-" for a reply without a valid call), with file_editor's sub-command."""
    call = rec.get("call") or {}
    name = call.get("name") or "-"
    sub = (call.get("params") or {}).get("command")
    return f"{name} {sub}" if sub and name == "file_editor" else name
