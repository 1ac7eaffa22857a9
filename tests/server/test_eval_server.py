"""`nexus-agent eval --server URL`: two workers share one served model; each task is one server session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.backends import server_settings
from pipeline.config import RunConfig, run_memory
from pipeline.errors import RunError
from pipeline.eval_files import claim_out_dir

TASKS = ("nexus-demo__semver-lite-1", "nexus-demo__iniconf-1")


def test_eval_workers_share_one_server(make_server, tmp_path: Path) -> None:
    server = make_server()
    out = tmp_path / "run"
    args = ["eval", "--server", server.url, "--out", str(out), "--instances", ",".join(TASKS), "--workers", "2"]
    args += ["--sandbox", "local", "--max-steps", "2", "--temperature", "0", "--max-new-tokens", "16"]
    env = {**os.environ, "NEXUS_AGENT_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    refused = subprocess.run(  # the client's memory settings would not apply there: refused, not ignored
        [sys.executable, "-c", "from cli.app import main; main()", *args, "--policy", "snapkv", "--budget", "64"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2 and "drop --policy, --budget" in refused.stderr and not out.exists()
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.app import main; main()", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 2
    sessions = set()
    for task in TASKS:
        steps = [json.loads(line) for line in (out / task / "trajectory.jsonl").read_text().splitlines()]
        stats = [s["stats"] for s in steps if s["type"] == "step"]
        assert [s["turn"] for s in stats] == [1, 2]  # the second turn continued the task's server session
        sessions |= {s["session_id"] for s in stats}
    assert len(sessions) == 2 and len(server.registry.entries) == 2  # one session per task, both on this server
    # the run is labelled by what the server runs (nexus-agent, 128 tokens), not by the client's defaults
    label = "nexus-agent__tiny-qwen3__nexus-agent-128-true-eviction"
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [p["model_name_or_path"] for p in predictions] == [label, label]
    report = json.loads((out / TASKS[0] / "report.json").read_text())
    served = server.config.cache_settings() | {"id": "tiny-qwen3", "tool_template": "model"}
    assert report["server"] | {"id": "tiny-qwen3"} == served
    assert report["server"]["policy"] == "nexus-agent" and report["server"]["budget"] == 128
    run = json.loads((out / "run.json").read_text())  # a resume must find the server running the same settings
    assert run["server"] == {"id": "tiny-qwen3", "model": "tiny-qwen3", "policy": "nexus-agent", "budget": 128,
                             "protocol": "true-eviction"}  # fmt: skip
    cfg = RunConfig(server=server.url, memory=run_memory(), max_steps=2, temperature=0, max_new_tokens=16)
    claim_out_dir(out, cfg, server_settings(server.url))  # the same server: resumable
    with pytest.raises(RunError, match="holds a run with other settings"):
        claim_out_dir(out, cfg, {**server_settings(server.url), "policy": "snapkv"})


def _eval(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEXUS_AGENT_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-c", "from cli.app import main; main()", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("n", [1, 2])
def test_eval_warmup_on_a_server_learns_the_profile_there(make_server, tmp_path: Path, n: int) -> None:
    from kvstore.profiles.profile import MemoryProfile

    ids = [*TASKS, "nexus-demo__csvkit-lite-1"]
    base = ["eval", "--instances", ",".join(ids), "--sandbox", "local", "--max-steps", "1", "--max-new-tokens", "4"]
    out = tmp_path / "run"
    refused = _eval([*base, "--server", make_server().url, "--warmup", str(n), "--out", str(out)], tmp_path)
    assert refused.returncode != 0 and "reads no profile directory" in refused.stdout + refused.stderr
    assert not out.exists()  # refused before any work

    store = tmp_path / "store"
    store.mkdir()
    server = make_server(budget=512, profile=store)
    args = [*base, "--server", server.url, "--warmup", str(n), "--out", str(out)]
    res = _eval(args, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    text = " ".join(res.stdout.split())
    assert f"warm-up: calibrating a memory profile from {n} finished tasks" in text and "saved by the server" in text
    (stored,) = store.glob("*.pt")
    kept = MemoryProfile.load(out / "memory-profile.pt")
    assert kept.meta["warmup"] == ids[:n] and kept.digest() == MemoryProfile.load(stored).digest()
    assert kept.conversations == n
    for i, name in enumerate(ids):
        steps = [json.loads(x) for x in (out / name / "trajectory.jsonl").read_text().splitlines()]
        used = [s["stats"].get("memory_profile") for s in steps if s["type"] == "step"]
        assert used and all((u or "").startswith("matched") == (i >= n) for u in used), (name, used)
    labels = {json.loads(x)["model_name_or_path"] for x in (out / "predictions.jsonl").read_text().splitlines()}
    assert labels == {f"nexus-agent__tiny-qwen3__nexus-agent-512-true-eviction-warmup{n}"}

    stored.unlink()  # the server lost it (another store, a restart): a resume with tasks left gives it back
    (out / ids[2] / "report.json").unlink()
    res = _eval(args, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "the server holds the batch's memory profile" in " ".join(res.stdout.split()) and stored.is_file()
