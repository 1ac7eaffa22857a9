"""`eval --warmup N`: a batch learns its own memory profile.

The first N selected tasks run without a profile; once they have finished, their conversations are calibrated
(kvstore.profiles.calibrate) into `<out>/memory-profile.pt`, and every other task's session uses it. With N = 1 the
task's
issue marks the task's text in its opening (kvstore.profiles.calibrate.statement_variants), as `solve` learns. In `bench
replay` a profile calibrated on one conversation did as well as one calibrated on two, and two as well as twelve
(docs/memory.md), so a batch pays for its profile with a task or two run on the plain default memory.

The profile records which tasks it was calibrated on, so a resumed batch keeps the same warm-up tasks whatever it
selects, and never calibrates twice.

Under --server the model is the server's: the server calibrates (POST /v1/nexus/profiles, server/profiles.py) and
saves the profile in the directory its sessions read profiles from, so the other tasks' sessions find it there; the
batch keeps a copy in `<out>/memory-profile.pt` and gives it to the server again when it resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.errors import RunError
from pipeline.files import TRAJECTORY
from tasks.schema import Task

WARMUP_PROFILE = "memory-profile.pt"  # in the eval's --out folder


def check(cfg: RunConfig, out: Path, tasks: list[Task]) -> None:
    """Before any work: a batch that has still to learn its profile needs tasks beyond the warm-up ones (and under
    --server, a server that can use what it learns)."""
    if cfg.warmup and cfg.server:
        check_server(cfg)
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
    rest = [t for t in todo if t.instance_id not in warm]
    if not profile.is_file():
        yield first
        first = []
        calibrate = calibrate_served if cfg.server else calibrate_warmup
        calibrate(cfg, out, [t for t in tasks if t.instance_id in warm], profile, say)
    elif cfg.server and rest:  # resumed: the server may have been restarted, or its profiles replaced, since
        install_served(cfg, profile, say)
    # a server reads its profile directory, where it saved the profile
    learned = cfg if cfg.server else replace(cfg, memory=replace(cfg.memory, profile=profile))
    yield first + [(learned, t) for t in rest]


def calibrate_warmup(cfg: RunConfig, out: Path, warm: list[Task], dest: Path, say: Callable[[str], None]) -> None:
    """Calibrate a profile from the warm-up tasks' conversations in this process, into `dest` (written at once, so
    an interrupted calibration leaves nothing and is redone on resume)."""
    from kvstore.errors import KVStoreError
    from kvstore.models.registry import load_model
    from kvstore.profiles.calibrate import statement_variants
    from pipeline.backends import set_threads
    from pipeline.conversations import calibrate_recorded

    conversations = _warmup_conversations(out, warm, dest, say)
    variants = statement_variants(conversations[0].messages, _statement(warm, conversations)) if conversations else []
    set_threads(cfg.threads, 1)
    model, tokenizer, _ = load_model(cfg.memory.model, device=cfg.memory.device)
    meta = {"model": cfg.memory.model, "warmup": [t.instance_id for t in warm]}
    try:
        profile = calibrate_recorded(model, tokenizer, conversations, say, meta=meta, variants=variants)
    except KVStoreError as e:
        raise RunError(
            f"--warmup {cfg.warmup}: cannot calibrate from the warm-up tasks ({e}); their results are kept: rerun "
            "the same command (it calibrates again), or use another --out with a larger --warmup or without it"
        ) from None
    profile.save(dest)
    say(f"warm-up: {profile.summary}; the other tasks use this profile")


def calibrate_served(cfg: RunConfig, out: Path, warm: list[Task], dest: Path, say: Callable[[str], None]) -> None:
    """Under --server: the server calibrates a profile on its model from the warm-up tasks' conversations and saves
    it where its sessions read profiles (POST /v1/nexus/profiles); a copy, with the warm-up tasks, goes to `dest`."""
    import base64

    from kvstore.profiles.profile import MemoryProfile

    conversations = _warmup_conversations(out, warm, dest, say)
    statement = _statement(warm, conversations)
    if len(conversations) < (1 if statement else 2):
        raise RunError(
            f"--warmup {cfg.warmup}: only {len(conversations)} of the warm-up tasks left a conversation; their results "
            "are kept: rerun the same command (it calibrates again), or use another --out with a larger --warmup or "
            "without it"
        )
    body = {"conversations": [c.messages for c in conversations], "sources": [c.name for c in conversations]}
    if statement:
        body["statement"] = statement
    try:
        answer = _post_profiles(cfg, body)
    except RunError as e:
        raise RunError(
            f"{e}; the warm-up tasks' results are kept: rerun the same command, or use another --out"
        ) from None
    for name in answer.get("left_out", []):
        say(f"left out: {name} (no opening and reply inside the replayed tokens)")
    profile = MemoryProfile.load_bytes(base64.b64decode(answer["profile"]))
    profile.meta["warmup"] = [t.instance_id for t in warm]
    profile.save(dest)
    say(f"warm-up: {profile.summary}, saved by the server as {answer['name']}; the other tasks' sessions use it")


def install_served(cfg: RunConfig, profile: Path, say: Callable[[str], None]) -> None:
    """Give the server the batch's learned profile again (the same file: it replaces itself)."""
    import base64

    answer = _post_profiles(cfg, {"profile": base64.b64encode(profile.read_bytes()).decode()})
    say(f"warm-up: the server holds the batch's memory profile as {answer['name']}")


def check_server(cfg: RunConfig) -> None:
    """--warmup with --server needs a `nexus-agent serve` that reads a profile directory."""
    from pipeline.backends import served

    server, settings = cfg.server, served(cfg)
    if "policy" not in settings:
        raise RunError(f"--warmup needs a `nexus-agent serve` server; {server} serves {settings['id']!r} otherwise")
    if not settings.get("profile_directory"):
        raise RunError(
            f"--warmup: the server at {server} reads no profile directory (memory profile: "
            f"{settings.get('memory_profile')}), so the profile learned would not be used; restart it with "
            "--memory-profile auto (the default) or --memory-profile DIR"
        )


def _statement(warm: list[Task], conversations: list) -> str | None:
    """With one warm-up task, its issue: it marks the task's text in the task's opening, so that its one conversation
    can make a profile (as `solve` learns). RunError when the issue is not in the opening."""
    from kvstore.profiles.calibrate import statement_variants

    if len(warm) != 1 or not conversations:
        return None
    if not statement_variants(conversations[0].messages, warm[0].problem_statement):
        raise RunError(
            f"--warmup 1: the issue of {warm[0].instance_id} is not in its opening, so one conversation cannot "
            "tell the agent's fixed text from the task's; its result is kept: use another --out with --warmup 2"
        )
    return warm[0].problem_statement


def _warmup_conversations(out: Path, warm: list[Task], dest: Path, say: Callable[[str], None]) -> list:
    from pipeline.conversations import load_conversation
    from pipeline.eval_files import task_dir

    found = [f for t in warm if (f := task_dir(out, t.instance_id) / TRAJECTORY).is_file()]
    say(f"warm-up: calibrating a memory profile from {len(found)} finished tasks' conversations -> {dest}")
    return [load_conversation(f) for f in found]


def _post_profiles(cfg: RunConfig, body: dict) -> dict:
    from pipeline.backends import post_profiles

    try:
        return post_profiles(cfg.server, body, cfg.api_key)
    except RunError as e:
        raise RunError(f"--warmup: {e}") from None


def _calibrated_on(profile: Path) -> list[str]:
    """The instance ids a learned profile was calibrated on ([] when there is none yet)."""
    if not profile.is_file():
        return []
    from kvstore.errors import KVStoreError
    from kvstore.profiles.profile import MemoryProfile

    try:
        return [str(i) for i in MemoryProfile.load(profile).meta.get("warmup", [])]
    except KVStoreError as e:
        raise RunError(f"{e}; remove it and the batch calibrates its profile again from its warm-up tasks") from None
