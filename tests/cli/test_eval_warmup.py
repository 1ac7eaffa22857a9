"""`eval --warmup N`: the first N tasks run without a memory profile, the others with one calibrated from their
conversations (pipeline.profiles.warmup); the batch keeps one label, resumes without calibrating again, and refuses what
cannot work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clilib import cli_env, nexus
from profilelib import save_tiny_profile

from kvstore.profiles.profile import MemoryProfile
from pipeline.config import RunConfig, run_memory
from pipeline.errors import RunError
from pipeline.profiles import warmup
from tasks import load_tasks

TASKS = load_tasks(None)[:4]


def test_warmup_settings_and_label(tmp_path: Path) -> None:
    cfg = RunConfig(warmup=2)
    assert cfg.memory.profile is None  # the warm-up tasks run without a profile, whatever the store holds
    assert RunConfig(warmup=2, memory=run_memory(profile="auto")).memory.profile is None
    assert cfg.model_label().endswith("-true-eviction-warmup2")
    for bad, match in (
        ({"warmup": -3}, "at least 1"),
        ({"warmup": 2, "memory": run_memory(profile=str(tmp_path))}, "leave --memory-profile out"),
        ({"warmup": 2, "replay_dir": tmp_path}, "excludes --replay-dir"),
        (
            {"warmup": 2, "server": "http://127.0.0.1:9/v1", "memory": run_memory(profile=str(tmp_path))},
            "leave --memory-profile",
        ),
    ):
        with pytest.raises(RunError, match=match):
            RunConfig(**bad)
    with pytest.raises(RunError, match="only 2 are selected"):
        warmup.check(cfg, tmp_path / "out", TASKS[:2])
    warmup.check(cfg, tmp_path / "out", TASKS[:3])


def test_eval_suggests_a_warmup_only_where_one_could_help(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))  # an empty profile store
    assert not RunConfig().lacks_profile  # the default model's shipped profile (pipeline.profiles.builtin)
    assert RunConfig(memory=run_memory(profile="none")).lacks_profile
    assert not RunConfig(warmup=2).lacks_profile and not RunConfig(memory=run_memory(policy="h2o")).lacks_profile
    assert not RunConfig(server="http://127.0.0.1:9/v1").lacks_profile
    assert not RunConfig(replay_dir=tmp_path).lacks_profile
    save_tiny_profile(tmp_path / "home" / "profiles" / "agent.pt")
    assert not RunConfig(memory=run_memory(profile="auto")).lacks_profile  # asked for: the store's profile is used
    assert RunConfig(memory=run_memory(profile="none")).lacks_profile  # not asked for: the store is not read


def _fake_calibration(calls: list) -> callable:
    def calibrate_warmup(cfg, out, warm, dest, say) -> None:
        calls.append([t.instance_id for t in warm])
        save_tiny_profile(dest)
        profile = MemoryProfile.load(dest)
        profile.meta["warmup"] = [t.instance_id for t in warm]
        profile.save(dest)

    return calibrate_warmup


def test_stages_calibrate_once_between_the_warmup_tasks_and_the_rest(tmp_path: Path, monkeypatch) -> None:
    calls: list = []
    monkeypatch.setattr(warmup, "calibrate_warmup", _fake_calibration(calls))
    cfg, out = RunConfig(warmup=2), tmp_path / "out"
    run = warmup.stages(cfg, out, TASKS, TASKS[1:], print)  # the first task finished before a stop
    first = next(run)
    assert [(c.memory.profile, t.instance_id) for c, t in first] == [(None, TASKS[1].instance_id)]
    assert calls == []  # nothing is calibrated before the warm-up tasks have run
    rest = next(run)
    assert calls == [[t.instance_id for t in TASKS[:2]]]
    assert [t.instance_id for _, t in rest] == [t.instance_id for t in TASKS[2:]]
    assert {c.memory.profile for c, _ in rest} == {out / warmup.WARMUP_PROFILE}
    assert {c.model_label() for c, _ in rest} == {cfg.model_label()}  # one label for the whole batch
    assert next(run, None) is None

    # resumed with another selection: the warm-up tasks are the ones the profile was learned from, none calibrated
    again = list(warmup.stages(cfg, out, TASKS[::-1], [TASKS[0], TASKS[3]], print))
    assert calls == [[t.instance_id for t in TASKS[:2]]]
    assert [[(c.memory.profile is None, t.instance_id) for c, t in s] for s in again] == [
        [(True, TASKS[0].instance_id), (False, TASKS[3].instance_id)]
    ]
    assert list(warmup.stages(RunConfig(), out, TASKS, TASKS[:2], print)) == [[(RunConfig(), t) for t in TASKS[:2]]]

    (out / warmup.WARMUP_PROFILE).write_bytes(b"not a profile")
    with pytest.raises(RunError, match="remove it and the batch calibrates its profile again"):
        next(warmup.stages(cfg, out, TASKS, TASKS, print))


@pytest.mark.slow  # three one-step tasks of the tiny model and one calibration: ~60 s each
@pytest.mark.usefixtures("bwrap_installed")
@pytest.mark.parametrize("n", [1, 2])
def test_eval_learns_its_profile_from_the_first_tasks(tmp_path: Path, tiny_model_dir: Path, n: int) -> None:
    env, out = cli_env(tmp_path / "home"), tmp_path / "run"
    ids = [t.instance_id for t in TASKS[:3]]
    args = ["eval", "--instances", ",".join(ids), "--model", str(tiny_model_dir), "--max-steps", "1",
            "--max-new-tokens", "4", "--sandbox", "bwrap", "--warmup", str(n), "--out", str(out)]  # fmt: skip
    res = nexus(*args, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"warm-up: calibrating a memory profile from {n} finished tasks" in res.stdout.replace("\n", " ")
    learned = out / warmup.WARMUP_PROFILE
    profile = MemoryProfile.load(learned)
    assert profile.meta["warmup"] == ids[:n] and profile.conversations == n
    for i, name in enumerate(ids):
        steps = [json.loads(x) for x in (out / name / "trajectory.jsonl").read_text().splitlines()]
        used = [s["stats"].get("memory_profile") for s in steps if "stats" in s]
        assert used and all((u is not None and u.startswith("matched")) == (i >= n) for u in used), (name, used)
    labels = {json.loads(x)["model_name_or_path"] for x in (out / "predictions.jsonl").read_text().splitlines()}
    assert len(labels) == 1 and labels.pop().endswith(f"-warmup{n}")

    stamp = learned.stat().st_mtime_ns
    res = nexus(*args, env=env, cwd=tmp_path)  # resumed: everything finished, nothing calibrated again
    assert res.returncode == 0 and "3 finished earlier" in res.stdout and learned.stat().st_mtime_ns == stamp
    more = args.index("--warmup") + 1
    res = nexus(*args[:more], "3", *args[more + 1 :], env=env, cwd=tmp_path)
    assert res.returncode != 0 and f"warmup: {n} -> 3" in res.stdout + res.stderr
