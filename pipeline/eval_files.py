"""The files of an `eval` run: which tasks it covers, which are finished, and its predictions and summary.

Layout of --out: run.json (the run's config), <instance_id>/{trajectory.jsonl, patch.diff, report.json},
predictions.jsonl (SWE-bench format) and summary.json, both rewritten atomically after every finished task. A task
whose run ended in an error (status "error": a missing repo, a crashed sandbox) is not finished: it is in neither
file's results (summary.json lists it under "errors" with its reason) and the next run of the batch runs it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvstore.cache.config import changed_results
from kvstore.models.registry import architecture_of
from kvstore.profiles.profile import fingerprint
from pipeline.config import RunConfig
from pipeline.errors import RunError
from pipeline.files import PATCH, REPORT, atomic_write, safe_name
from pipeline.folder_lock import LOCK_FILE
from pipeline.profiles.builtin import portable
from pipeline.report import turn_totals
from tasks.schema import Task

RUN_FILE, PREDICTIONS, SUMMARY = "run.json", "predictions.jsonl", "summary.json"
_RESULT_FIELDS = (
    "model", "policy", "budget", "protocol", "protect", "profile", "seed", "temperature", "max_new_tokens", "max_steps",
    "warmup",
)  # fmt: skip
# the value a field stands for in a run.json written before the field existed
_OLDER_RUNS = {"protect": "none", "profile": None, "warmup": 0}


def select(tasks: list[Task], instances: str | None, slice_: str | None) -> list[Task]:
    """The tasks named by --instances a,b (in that order) or --slice a:b (Python slice of the source order)."""
    if instances is not None and slice_ is not None:
        raise RunError("give --instances or --slice, not both")
    if instances is not None:  # an empty one selects nothing, not everything
        by_id = {t.instance_id: t for t in tasks}
        wanted = [i.strip() for i in instances.split(",") if i.strip()]
        unknown = [i for i in wanted if i not in by_id]
        if unknown:
            raise RunError(f"unknown instance id(s) in --instances: {', '.join(unknown)}")
        return [by_id[i] for i in dict.fromkeys(wanted)]
    if slice_ is not None:
        try:
            start, stop = (int(p) if p.strip() else None for p in slice_.split(":"))
        except ValueError:
            raise RunError(f"--slice {slice_!r}: use start:stop, e.g. 0:10 or 5:") from None
        return tasks[start:stop]
    return tasks


def finished(report: dict[str, Any] | None) -> bool:
    """Whether a task's report is a result (graded), not an error of the run (which the next run retries)."""
    return report is not None and report.get("status") != "error"


def task_dir(out: Path, instance_id: str) -> Path:
    return out / safe_name(instance_id)


def read_report(out: Path, instance_id: str) -> dict[str, Any] | None:
    """The finished task's report, or None when it has not finished (no report, or one that is not this task's
    report: unparsable, not UTF-8, not an object, another instance's). Such a task is run again."""
    return _report_of(_load(task_dir(out, instance_id) / REPORT), instance_id)


def _load(path: Path) -> Any:
    """A report file's JSON; None when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # ValueError: bad JSON and bad UTF-8 alike
        return None


def _report_of(report: Any, instance_id: str) -> dict[str, Any] | None:
    """`report` when it is `instance_id`'s report (an object of that instance with a status), else None."""
    if not isinstance(report, dict) or report.get("instance_id") != instance_id or "status" not in report:
        return None
    return report


def claim_out_dir(out: Path, cfg: RunConfig, served: dict[str, Any] | None = None) -> None:
    """Make --out this run's folder and record its settings there; refuse a folder that is not a folder, holds a
    run with other result-changing settings, or holds results of an unknown run (no run.json). `served`: under
    --server, the settings the server reports (a resumed run must find the server running the same ones)."""
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} is a file, not a folder; give a folder (it is created when missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    for name in (RUN_FILE, PREDICTIONS, SUMMARY):
        if (out / name).is_dir():
            raise RunError(f"{out / name} is a folder where this run writes a file; move it away or use another --out")
    path = out / RUN_FILE
    wanted = {k: cfg.to_dict()[k] for k in _RESULT_FIELDS} | {"replay": cfg.replaying}
    wanted["profile"] = portable(cfg.memory.profile)  # a shipped profile by its name, not the install's path
    wanted["profiles"], others = _fingerprint(cfg.memory.profile, cfg.memory.model)
    if served is not None:
        wanted["server"] = {k: served.get(k) for k in ("id", "model", "policy", "budget", "protocol")}
    else:  # what this version's memory computes, defaults included: a later version may change a default
        wanted["memory"] = cfg.session_config().cache.results()
    if path.is_file():
        held = _read_run_file(path)
        held = _OLDER_RUNS | held
        profiles, memory = wanted.pop("profiles"), wanted.pop("memory", None)
        diff = [f"{k}: {held.get(k)!r} -> {v!r}" for k, v in wanted.items() if held.get(k) != v]
        if diff:
            settings = "; ".join(diff)
            hint = "resume it as it was or use another --out"
            raise RunError(f"{out} holds a run with other settings ({settings}); {hint}")
        _check_memory(out, held.get("memory"), memory)
        if "profiles" in held:  # a run.json from before the record: its profiles are not known
            _check_profiles(out, cfg.memory.profile, held["profiles"], profiles, others)
        return
    if any(p.name != LOCK_FILE for p in out.iterdir()):
        raise RunError(
            f"{out} is not empty but holds no {RUN_FILE}: results of another run or tool would be overwritten; "
            "use an empty or new --out"
        )
    try:
        atomic_write(path, json.dumps(wanted, indent=2) + "\n")
    except OSError as exc:
        raise RunError(f"--out {out} is not writable ({exc.strerror})") from None


def _check_memory(out: Path, held: Any, now: dict[str, Any] | None) -> None:
    """Refuse to resume a run whose memory computed otherwise than this version's would: a default changed by an
    upgrade (a run.json from before the record holds none: not known, so it resumes)."""
    if held is None or now is None:
        return
    changed = changed_results(held, now) if isinstance(held, dict) else [f"{RUN_FILE}'s memory is not a record"]
    if changed:
        raise RunError(
            f"{out} holds a run whose memory ran with other settings ({'; '.join(changed)}): nexus-agent's defaults "
            "changed since it started, so its finished tasks would mix with results of another memory; resume it "
            "with the version that started it, or use another --out"
        )


def _fingerprint(path: Path | None, model: str) -> tuple[dict[str, str] | None, set[str]]:
    """The digests of the profiles at `path` that fit the run's model (all of them while its config is not on this
    machine yet), and the names of the others (kvstore.profiles.profile.fingerprint)."""
    if path is None:
        return None, set()

    return fingerprint(path, architecture_of(model))


def _check_profiles(out: Path, path: Path | None, held: dict | None, now: dict | None, others: set[str]) -> None:
    """Refuse to resume a run whose memory profiles for its model changed since it started (the path alone is in
    `profile`); other models' profiles (`others`, never used by its sessions) may be added, changed or removed."""
    held, now = (held if isinstance(held, dict) else {}), now or {}
    changed = [f"{n} (changed)" for n in held if n in now and now[n] != held[n]]
    changed += [f"{n} (removed)" for n in held if n not in now and n not in others]
    changed += [f"{n} (new)" for n in now if n not in held]
    if changed:
        raise RunError(
            f"{out} holds a run whose memory profiles in {path} changed since it started: {', '.join(changed)}; "
            "its finished tasks ran with the earlier ones: restore them, or use another --out"
        )


def _read_run_file(path: Path) -> dict[str, Any]:
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise RunError(
            f"{path} is unreadable or corrupt ({type(exc).__name__}); fix or delete it, or use another --out"
        ) from None
    if not isinstance(held, dict):
        raise RunError(f"{path} is not a run record (a JSON object); fix or delete it, or use another --out")
    return held


def write_outputs(out: Path, tasks: list[Task], wall_s: float) -> dict[str, Any]:
    """Rewrite predictions.jsonl and summary.json from the tasks' reports (predictions: the finished ones), and from
    those of the other tasks finished in `out` (an earlier run of this batch on other --instances or a --slice: a
    rerun of a part loses none of the rest); the summary."""
    reports = [r for t in tasks if (r := read_report(out, t.instance_id)) is not None]
    others = _finished_elsewhere(out, {t.instance_id for t in tasks})
    reports += others
    lines = []
    for r in filter(finished, reports):
        patch_path = task_dir(out, r["instance_id"]) / PATCH
        patch = patch_path.read_text(encoding="utf-8", errors="replace") if patch_path.is_file() else ""
        pred = {"instance_id": r["instance_id"], "model_name_or_path": r["model_name_or_path"], "model_patch": patch}
        lines.append(json.dumps(pred) + "\n")
    atomic_write(out / PREDICTIONS, "".join(lines))
    summary = summarize(reports, len(tasks) + len(others), wall_s)
    atomic_write(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return summary


def _finished_elsewhere(out: Path, selected: set[str]) -> list[dict[str, Any]]:
    """The finished reports of task folders in `out` whose task is not in `selected`, in folder-name order."""
    found = []
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        loaded = _load(folder / REPORT)
        ident = loaded.get("instance_id") if isinstance(loaded, dict) else None
        if isinstance(ident, str) and ident not in selected and task_dir(out, ident) == folder:
            report = _report_of(loaded, ident)
            if finished(report):
                found.append(report)
    return found


def summarize(reports: list[dict[str, Any]], total: int, wall_s: float) -> dict[str, Any]:
    """summary.json: the finished tasks' results, and apart from them the tasks whose run failed, with the reason."""
    errors = {r["instance_id"]: str(r.get("error") or "unknown error") for r in reports if not finished(r)}
    reports = [r for r in reports if finished(r)]
    statuses: dict[str, int] = {}
    for r in reports:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    turns = [t for r in reports for t in r.get("turns", [])]
    return {
        "total": total,
        "finished": len(reports),
        "resolved": sum(bool(r.get("resolved")) for r in reports),
        "statuses": statuses,
        "resolved_ids": sorted(r["instance_id"] for r in reports if r.get("resolved")),
        "exit_reasons": {r["instance_id"]: r.get("exit_reason") for r in reports},
        "totals": turn_totals(turns),
        "turns": len(turns),
        "mean_per_turn": _means(turns),
        "errors": errors,
        "agent_s": round(sum(r.get("agent_s", 0) for r in reports), 1),
        "wall_s_this_session": round(wall_s, 1),
    }


def _means(turns: list[dict[str, Any]]) -> dict[str, float]:
    """Per-turn means of the cache statistics (empty for backends without them, e.g. replay)."""
    keys = ("prefill_tokens", "generated_tokens", "evicted_tokens", "held_tokens", "prefill_s", "decode_s", "evict_s")
    with_stats = [t for t in turns if "held_tokens" in t]
    if not with_stats:
        return {}
    return {k: round(sum(t.get(k) or 0 for t in with_stats) / len(with_stats), 3) for k in keys}
