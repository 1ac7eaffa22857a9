"""`eval --warmup N`: a batch learns its own memory profile.

The first N selected tasks run without a profile; once they have finished, their conversations are calibrated
(kvstore.calibrate) into `<out>/memory-profile.pt`, and every other task's session uses it. In `bench replay` a
profile calibrated on two conversations did about as well as one calibrated on twelve (docs/memory.md), so a batch
pays for its profile with two or three tasks run on the plain default memory.

The profile records which tasks it was calibrated on, so a resumed batch keeps the same warm-up tasks whatever it
selects, and never calibrates twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from pipeline.config import RunConfig, RunError
from pipeline.files import TRAJECTORY
from tasks.schema import Task

WARMUP_PROFILE = "memory-profile.pt"  # in the eval's --out folder


def check(cfg: RunConfig, out: Path, tasks: list[Task]) -> None:
    """Before any work: a batch that has still to learn its profile needs tasks beyond the warm-up ones."""
    if cfg.warmup and not (out / WARMUP_PROFILE).is_file() and len(tasks) <= cfg.warmup:
        raise RunError(
            f"--warmup {cfg.warmup} learns a profile for the tasks after the first {cfg.warmup}, but only "
            f"{len(tasks)} are selected; select more tasks or leave --warmup out"
        )


def stages(
    cfg: RunConfig, out: Path, tasks: list[Task], todo: list[Task], say: Callable[[str], None]
) -> Iterator[list[tuple[RunConfig, Task]]]:
    """The (config, task) pairs to run, in stages; without --warmup one stage. With it: the unfinished warm-up tasks
    (no profile), then, after calibrating from them (between the stages), the rest (with the learned profile)."""
    if not cfg.warmup:
        yield [(cfg, t) for t in todo]
        return
    profile = out / WARMUP_PROFILE
    warm = set(_calibrated_on(profile)) or {t.instance_id for t in tasks[: cfg.warmup]}
    first = [(cfg, t) for t in todo if t.instance_id in warm]
    if not profile.is_file():
        yield first
        first = []
        calibrate_warmup(cfg, out, [t for t in tasks if t.instance_id in warm], profile, say)
    learned = replace(cfg, profile=profile)
    yield first + [(learned, t) for t in todo if t.instance_id not in warm]


def calibrate_warmup(cfg: RunConfig, out: Path, warm: list[Task], dest: Path, say: Callable[[str], None]) -> None:
    """Calibrate a profile from the warm-up tasks' conversations in this process, into `dest` (written at once, so
    an interrupted calibration leaves nothing and is redone on resume)."""
    from kvstore.errors import KVStoreError
    from kvstore.models import load_model
    from pipeline.backends import set_threads
    from pipeline.conversations import calibrate_recorded, load_conversation
    from pipeline.eval_files import task_dir

    files = [task_dir(out, t.instance_id) / TRAJECTORY for t in warm]
    found = [f for f in files if f.is_file()]
    say(f"warm-up: calibrating a memory profile from {len(found)} finished tasks' conversations -> {dest}")
    conversations = [load_conversation(f) for f in found]
    set_threads(cfg.threads, 1)
    model, tokenizer, _ = load_model(cfg.model, device=cfg.device)
    meta = {"model": cfg.model, "warmup": [t.instance_id for t in warm]}
    try:
        profile = calibrate_recorded(model, tokenizer, conversations, say, meta=meta)
    except KVStoreError as e:
        raise RunError(
            f"--warmup {cfg.warmup}: cannot calibrate from the warm-up tasks ({e}); their results are kept: rerun "
            "with --retry-errors, or use another --out with a larger --warmup or without it"
        ) from None
    profile.save(dest)
    say(f"warm-up: {profile.summary}; the other tasks use this profile")


def _calibrated_on(profile: Path) -> list[str]:
    """The instance ids a learned profile was calibrated on ([] when there is none yet)."""
    if not profile.is_file():
        return []
    from kvstore.errors import KVStoreError
    from kvstore.profile import MemoryProfile

    try:
        return [str(i) for i in MemoryProfile.load(profile).meta.get("warmup", [])]
    except KVStoreError as e:
        raise RunError(f"{e}; remove it and the batch calibrates its profile again from its warm-up tasks") from None
