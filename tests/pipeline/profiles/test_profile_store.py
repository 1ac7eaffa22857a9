"""The profile store: `nexus-agent calibrate` without --out (or a run with --learn-profile) writes the profile under
$NEXUS_AGENT_HOME/profiles, and a later session of that model whose opening carries the template uses it when it asks
for the store (--memory-profile auto); the default, none, never reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, nexus
from profilelib import save_tiny_profile
from typer.testing import CliRunner

from cli.app import app
from tasks import get_task


def tokenizer_of(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


TASK = "nexus-demo__pagekit-1"  # not one of the two calibration conversations
pytestmark = pytest.mark.usefixtures("bwrap_installed")


def _memory_profile_stats(out: Path) -> list[str | None]:
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    return [s.get("stats", {}).get("memory_profile") for s in steps if "stats" in s]


@pytest.mark.slow  # one calibration of two recorded runs, two one-step solves of the tiny model: ~40 s
def test_a_calibrated_profile_is_used_by_later_sessions_of_the_same_agent(tmp_path: Path, tiny_model_dir: Path) -> None:
    env = cli_env(tmp_path / "home")
    sources = [str(GOLD_DIR / f"nexus-demo__{name}.gold.jsonl") for name in ("csvkit-lite-1", "iniconf-1")]
    res = nexus("calibrate", *sources, "--model", str(tiny_model_dir), "--dtype", "fp32", "--max-tokens", "2600",
                env=env, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    (stored,) = (tmp_path / "home" / "profiles").glob("*.pt")
    assert "runs with --memory-profile auto (not the default, builtin) use it" in " ".join(res.stderr.split())

    args = ["--model", str(tiny_model_dir), "--max-steps", "1", "--max-new-tokens", "4", "--sandbox", "bwrap"]
    auto = ["--memory-profile", "auto", "--out", str(tmp_path / "auto")]
    res = nexus("solve", TASK, *args, *auto, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((tmp_path / "auto" / "report.json").read_text())
    assert report["model"].endswith(f"memory profile {stored.parent})")  # the run says it used the store
    used = _memory_profile_stats(tmp_path / "auto")
    assert used and all(s is not None and s.startswith("matched") and stored.name in s for s in used)
    assert "memory profile: matched" in res.stdout and stored.name in res.stdout  # the summary says so

    res = nexus("solve", TASK, *args, "--out", str(tmp_path / "off"), env=env, cwd=tmp_path)  # the default: none
    assert res.returncode == 0, res.stdout + res.stderr
    assert _memory_profile_stats(tmp_path / "off") and not any(_memory_profile_stats(tmp_path / "off"))
    assert "memory profile" not in json.loads((tmp_path / "off" / "report.json").read_text())["model"]
    assert "memory profile: none (the default); a run with --learn-profile" in " ".join(res.stdout.split())


@pytest.mark.slow  # three one-step solves of the tiny model and one calibration: ~40 s
def test_learning_is_asked_for_and_its_profile_used_only_when_chosen(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch
) -> None:
    """A run learns a profile only with --learn-profile, never from a conversation without a valid tool call, and a
    learned profile changes no later run (nor its label) unless that run asks for the store (--memory-profile auto)."""
    from kvstore.profiles.profile import MemoryProfile
    from kvstore.session.config import SessionConfig
    from kvstore.session.session import Session
    from pipeline.profiles.learn import learn_after

    env = cli_env(tmp_path / "home")
    store = tmp_path / "home" / "profiles"
    args = ["--model", str(tiny_model_dir), "--max-steps", "1", "--max-new-tokens", "4", "--sandbox", "bwrap"]

    def solve(task: str, name: str, *more: str):
        res = nexus("solve", task, *args, *more, "--out", str(tmp_path / name), env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        return " ".join(res.stdout.split())

    said = solve("nexus-demo__iniconf-1", "default")  # the default: nothing learned, the store untouched
    assert "learning a memory profile" not in said and "--learn-profile" in said and not store.exists()
    said = solve("nexus-demo__iniconf-1", "gibberish", "--learn-profile")  # asked, but the random model made no call
    assert "memory profile: not learned (this run made no valid tool call" in said and not store.exists()

    # a conversation with valid tool calls (a recorded solution) teaches the store, as --learn-profile does at the end
    from kvstore.models.registry import load_model

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    model, tokenizer, _ = load_model(str(tiny_model_dir))
    session = Session(model, tokenizer, SessionConfig(model=str(tiny_model_dir)))
    issue = get_task("nexus-demo__csvkit-lite-1").problem_statement
    said = learn_after(GOLD_DIR / "nexus-demo__csvkit-lite-1.gold.jsonl", issue, print, session=session) or ""
    (learned,) = store.glob("*.pt")
    assert f"-> {learned}" in said and "--memory-profile auto" in said and not list(store.rglob("*.jsonl"))
    profile = MemoryProfile.load(learned)
    assert profile.conversations == 1
    template = tokenizer_of(tiny_model_dir).decode(profile.prefix + profile.suffix)
    assert issue.strip()[:40] not in template and "Here is an issue reported against it" in template  # the issue: not

    solve(TASK, "unasked")  # a later run of the same agent: unchanged, its label too
    assert not any(_memory_profile_stats(tmp_path / "unasked"))
    report = json.loads((tmp_path / "unasked" / "report.json").read_text())
    assert "profile" not in report["model_name_or_path"] and "memory profile" not in report["model"]
    solve(TASK, "asked", "--memory-profile", "auto")  # asked for the store: it uses the profile, and says so
    used = _memory_profile_stats(tmp_path / "asked")
    assert used and all(s is not None and s.startswith("matched") and learned.name in s for s in used)
    report = json.loads((tmp_path / "asked" / "report.json").read_text())
    assert report["model_name_or_path"].endswith("-profile-profiles")
    assert list(store.glob("*.pt")) == [learned]


def test_learning_needs_the_default_memory_and_no_profile_file(tmp_path: Path) -> None:
    from pipeline.config import RunConfig, run_memory
    from pipeline.errors import RunError

    assert not RunConfig().learn and run_memory().profile == "builtin"  # the defaults: no learning, no store
    for memory, replay, message in (
        ({"policy": "snapkv"}, None, "default memory"),
        ({"profile": str(tmp_path)}, None, "no --memory-profile file"),
        ({}, tmp_path / "r.jsonl", "excludes --replay"),
    ):
        with pytest.raises(RunError, match=message):
            RunConfig(memory=run_memory(**memory), replay=replay, learn=True)


def test_an_eval_folder_does_not_resume_with_another_profile(tmp_path: Path, monkeypatch) -> None:
    from pipeline.config import RunConfig, run_memory
    from pipeline.errors import RunError
    from pipeline.eval_files import RUN_FILE, claim_out_dir

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    auto = run_memory(profile="auto")  # a run that asked for the store
    claim_out_dir(out, RunConfig(memory=auto))  # started before any profile was calibrated
    store = tmp_path / "home" / "profiles"
    store.mkdir(parents=True)
    save_tiny_profile(store / "agent.pt")  # then one enters the store: the rest of the run would differ
    with pytest.raises(RunError, match=r"profile: None -> '.*profiles'"):
        claim_out_dir(out, RunConfig(memory=auto))
    with pytest.raises(RunError, match=r"profile: None -> '.*builtin-v2-"):  # the default: the shipped profile
        claim_out_dir(out, RunConfig())
    claim_out_dir(out, RunConfig(memory=run_memory(profile="none")))  # as it was
    held = json.loads((out / RUN_FILE).read_text())
    del held["profile"]  # a run folder from before the option
    (out / RUN_FILE).write_text(json.dumps(held))
    claim_out_dir(out, RunConfig(memory=run_memory(profile="none")))


def _tiny_run(tmp_path: Path, monkeypatch):
    """A maker of the RunConfig of the tiny random Qwen3 (the model save_tiny_profile calibrates on; the config
    resolves --memory-profile auto when it is made), its profile store empty."""
    from sessionlib import save_tiny_chat_model

    from pipeline.config import RunConfig, run_memory

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "profiles").mkdir(parents=True)
    model = str(save_tiny_chat_model(tmp_path / "tiny-qwen3"))
    return lambda: RunConfig(memory=run_memory(model=model, profile="auto"))


def test_an_eval_folder_does_not_resume_after_its_profiles_changed(tmp_path: Path, monkeypatch) -> None:
    from kvstore.profiles.profile import MemoryProfile
    from pipeline.errors import RunError
    from pipeline.eval_files import RUN_FILE, claim_out_dir

    cfg = _tiny_run(tmp_path, monkeypatch)
    store = tmp_path / "home" / "profiles"
    stored = save_tiny_profile(store / "agent.pt")
    out = tmp_path / "run"
    claim_out_dir(out, cfg())  # with the store's profile
    assert json.loads((out / RUN_FILE).read_text())["profiles"].keys() == {"agent.pt"}
    claim_out_dir(out, cfg())  # unchanged: resumes
    profile = MemoryProfile.load(stored)
    profile.prefix_weight = profile.prefix_weight * 2  # a new calibration replaced it, under the same name
    profile.save(stored)
    with pytest.raises(RunError, match=r"profiles in .*profiles changed since it started: agent\.pt \(changed\)"):
        claim_out_dir(out, cfg())
    MemoryProfile.load(stored).save(store / "other.pt")
    with pytest.raises(RunError, match=r"agent\.pt \(changed\), other\.pt \(new\)"):
        claim_out_dir(out, cfg())
    stored.unlink()
    with pytest.raises(RunError, match=r"agent\.pt \(removed\), other\.pt \(new\)"):
        claim_out_dir(out, cfg())
    held = json.loads((out / RUN_FILE).read_text())
    del held["profiles"]  # a run folder from before the record: its profiles are not known
    (out / RUN_FILE).write_text(json.dumps(held))
    claim_out_dir(out, cfg())


def test_other_models_profiles_do_not_stop_a_resume(tmp_path: Path, monkeypatch) -> None:
    """A store serves several models; a run's sessions skip the others' profiles, so calibrating, recalibrating or
    removing one of those while a batch is paused does not block resuming it."""
    from kvstore.profiles.profile import MemoryProfile
    from pipeline.errors import RunError
    from pipeline.eval_files import RUN_FILE, claim_out_dir

    cfg = _tiny_run(tmp_path, monkeypatch)
    store = tmp_path / "home" / "profiles"
    mine = save_tiny_profile(store / "mine.pt")
    other = MemoryProfile.load(mine)
    other.identity = {**other.identity, "model_type": "llama"}  # another model's
    other.save(store / "before.pt")
    out = tmp_path / "run"
    claim_out_dir(out, cfg())
    assert json.loads((out / RUN_FILE).read_text())["profiles"].keys() == {"mine.pt"}
    other.save(store / "after.pt")  # another model calibrated meanwhile
    other.prefix_weight = other.prefix_weight * 2
    other.save(store / "before.pt")  # and another recalibrated
    claim_out_dir(out, cfg())
    (store / "before.pt").unlink()
    claim_out_dir(out, cfg())
    MemoryProfile.load(mine).save(store / "mine2.pt")  # this model's profiles still count
    with pytest.raises(RunError, match=r"mine2\.pt \(new\)$|mine2\.pt \(new\);"):
        claim_out_dir(out, cfg())

    # a run started while its model's config was not on this machine (a GGUF not yet converted) recorded every
    # profile; once the model is there, the other models' profiles in that record may still change or go
    (store / "mine2.pt").unlink()
    held = json.loads((out / RUN_FILE).read_text())
    held["profiles"]["after.pt"] = "0" * 16
    (out / RUN_FILE).write_text(json.dumps(held))
    claim_out_dir(out, cfg())


def test_a_models_architecture_is_read_without_loading_it(tmp_path: Path, monkeypatch) -> None:
    from sessionlib import save_tiny_chat_model

    from kvstore.defaults import DEFAULT_MODEL
    from kvstore.models.registry import architecture_of

    monkeypatch.setenv("NEXUS_AGENT_CACHE", str(tmp_path / "cache"))  # the default GGUF not converted here
    found = architecture_of(str(save_tiny_chat_model(tmp_path / "tiny")))
    assert found == {"model_type": "qwen3", "num_layers": 2, "num_kv_heads": found["num_kv_heads"],
                     "head_dim": found["head_dim"]}  # fmt: skip
    assert architecture_of(DEFAULT_MODEL) is None  # not converted: unknown, nothing fetched or converted
    assert not (tmp_path / "cache" / "models" / DEFAULT_MODEL).exists()
    assert architecture_of("no-such-org/no-such-model") is None
    (tmp_path / "broken").mkdir()
    assert architecture_of(str(tmp_path / "broken")) is None  # no config.json


def test_profiles_lists_the_store_and_names_a_damaged_file(tmp_path: Path) -> None:
    env = {"NEXUS_AGENT_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    empty = CliRunner().invoke(app, ["profiles"], env=env)
    assert empty.exit_code == 0 and "no memory profiles in" in empty.output and "nexus-agent calibrate" in empty.output
    store = tmp_path / "home" / "profiles"
    store.mkdir(parents=True)
    save_tiny_profile(store / "agent.pt")
    (store / "broken.pt").write_bytes(b"not a profile")
    listed = CliRunner().invoke(app, ["profiles"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "2 memory profiles in" in listed.output
    row = next(line for line in listed.output.splitlines() if "agent.pt" in line)
    assert "tiny" in row and "2 x 2" in row and " 3 " in row  # model, layers x kv heads, conversations
    assert "damaged" in next(line for line in listed.output.splitlines() if "broken.pt" in line)
    missing = CliRunner().invoke(app, ["profiles", str(tmp_path / "nowhere")], env=env)
    assert missing.exit_code != 0 and "no such folder" in str(missing.exception)


@pytest.mark.slow  # three one-request chats of the tiny model: ~30 s
def test_chats_learn_only_when_asked_and_from_tool_calls(tmp_path: Path, tiny_model_dir: Path, repo: Path) -> None:
    """Leaving a chat learns nothing by default; with --learn-profile, a chat whose model made no valid tool call (the
    random model's replies) learns nothing either; a chat asks for the store's profile with --memory-profile auto."""
    import subprocess
    import sys

    env, store = cli_env(tmp_path / "home"), tmp_path / "home" / "profiles"

    def chat(name: str, *more: str) -> str:
        args = ["chat", "--session", name, "--model", str(tiny_model_dir), "--max-steps", "1", "--max-new-tokens",
                "4", "--yolo", "--repo", str(repo), *more]  # fmt: skip
        cmd = [sys.executable, "-c", "from cli.app import main; main()", *args]
        res = subprocess.run(cmd, env=env, cwd=tmp_path, input=f"a request of {name}\n", capture_output=True,
                             text=True, timeout=300)  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        return " ".join(res.stdout.split())

    assert "memory profile:" not in chat("off") and not store.exists()
    said = chat("one", "--learn-profile")
    assert "memory profile: not learned (this chat made no valid tool call" in said and not store.exists()

    store.mkdir(parents=True)
    save_tiny_profile(store / "agent.pt")  # a profile of another tiny model: the chat's sessions skip it
    said = chat("two", "--memory-profile", "auto")
    assert f"memory profile {store}" in said  # the chat names the store it was asked to read


def test_without_its_statement_a_conversation_waits_in_the_pool_for_another(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch
) -> None:
    from kvstore.models.registry import load_model
    from pipeline.profiles.learn import POOL, learn_from_run

    monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
    pool = tmp_path / "home" / "profiles" / POOL / "tiny"
    pool.mkdir(parents=True)
    (pool / "00000000000000000001--old.jsonl").write_text('{"type": "header"}\nnot json\n{"type": "footer"}\n')
    model, tokenizer, _ = load_model(str(tiny_model_dir))
    run = GOLD_DIR / "nexus-demo__pagekit-1.gold.jsonl"
    said = learn_from_run("tiny", model, tokenizer, run, print)  # the damaged one is no partner: nothing to calibrate
    assert said is not None and "this run's conversation is kept" in said
    assert [f.name.partition("--")[2] for f in pool.glob("*.jsonl")] == ["nexus-demo__pagekit-1.gold.jsonl"]
    other = GOLD_DIR / "nexus-demo__iniconf-1.gold.jsonl"  # no statement given: the pool pairs the two
    said = learn_from_run("tiny", model, tokenizer, other, print, statement="not in this conversation's opening")
    assert said is not None and "learned" in said and "from 2 conversations" in said
    assert not list(pool.glob("*.jsonl")) and len(list((tmp_path / "home" / "profiles").glob("*.pt"))) == 1


def test_calibrate_learns_from_one_conversation_whose_task_is_marked(tmp_path: Path, tiny_model_dir: Path) -> None:
    from kvstore.profiles.profile import MemoryProfile

    env, gold = cli_env(tmp_path / "home"), GOLD_DIR / "nexus-demo__csvkit-lite-1.gold.jsonl"
    res = nexus("calibrate", str(gold), "--model", str(tiny_model_dir), "--max-tokens", "2600", "--out",
                str(tmp_path / "one.pt"), env=env, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    profile = MemoryProfile.load(tmp_path / "one.pt")
    text = tokenizer_of(tiny_model_dir).decode(profile.prefix + profile.suffix)
    assert profile.conversations == 1 and "You are a software engineer" in text and "<github_issue>" in text
    assert "Quoted fields" not in text  # the issue is the task's text, not the agent's

    bare = tmp_path / "bare.traj.json"  # no mark: one opening cannot tell its fixed text from the task's
    bare.write_text(json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                             {"role": "assistant", "content": "a"}]}))  # fmt: skip
    res = nexus("calibrate", str(bare), "--model", str(tiny_model_dir), env=env, cwd=tmp_path)
    assert res.returncode == 2 and "needs its task's text marked" in res.stderr and res.stderr.count("\n") == 1
