"""One agent run end to end, below the command line: config -> task -> sandbox -> agent -> patch -> grade -> files.

- `pipeline.config`: `RunConfig` (every run setting and its default; the model and its memory in `memory`, made by
  `run_memory(policy=..., budget=...)`), `RunError`.
- `pipeline.run`: `run_task(task, cfg, out_dir)` -> the report (also written as report.json).
- `pipeline.report`, `pipeline.files`: report.json's content, the run folder's files.
- `pipeline.backends`: the model backend a run asks for (a local session, or a recording to replay).
- `pipeline.eval`, `pipeline.eval_files`, `pipeline.executors`: an eval batch, its files and its workers (process
  pool, Ray).
- `pipeline.profiles`: memory profiles: the store and --memory-profile's reading, learning, an eval's warm-up.
- `pipeline.chat`: a chat session, `open_chat(ChatSettings)` -> a `ChatRunner` (one request = one agent turn).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunConfig", "RunError", "run_memory", "run_task"]


def __getattr__(name: str) -> Any:
    if name in ("RunConfig", "RunError", "run_memory"):
        from pipeline import config  # lazy: the package's names load on first use

        return getattr(config, name)
    if name == "run_task":
        from pipeline.run import run_task  # lazy: urllib, off --help

        return run_task
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
