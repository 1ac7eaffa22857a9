"""`nexus-agent bench replay` on a tiny random Qwen3 (real tokenizer): recorded conversations replayed teacher-forced,
each memory compared with the full cache; and the conversion of mini-swe-agent traces into this project's format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from clilib import GOLD_DIR
from sessionlib import save_tiny_chat_model
from typer.testing import CliRunner

from agent.parsing import parse_call
from benchmarks.replay_data import TRACES_DIR, shared_data_dir
from cli.app import app
from kvstore.errors import KVStoreError
from pipeline.conversations import conversation_files, load_conversation

TRAJECTORY = GOLD_DIR / "nexus-demo__invoicer-1.gold.jsonl"
MINI_SWE = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "<pr_description>fix the bug</pr_description>"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "ls -la /testbed"}'}}],
        },
        {"role": "tool", "content": "<returncode>0</returncode>\n<output>setup.py</output>"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "exit", "content": "diff --git a/x b/x"},
    ]
}


def test_mini_swe_agent_traces_become_project_conversations(tmp_path: Path) -> None:
    path = tmp_path / "demo__demo-1.traj.json"
    path.write_text(json.dumps(MINI_SWE))
    conv = load_conversation(path)
    assert conv.name == "demo__demo-1"
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert "execute_bash" in conv.messages[0]["content"]  # this project's system prompt, with its tools
    call = parse_call(conv.messages[2]["content"])
    assert (call.name, call.params, call.thought) == ("execute_bash", {"cmd": "ls -la /testbed"}, "Let me look.")
    assert conv.messages[3]["content"].startswith("<returncode>0")  # the tool result is the next observation


def test_a_run_folders_trajectory_is_named_after_its_folder(tmp_path: Path) -> None:
    gold = GOLD_DIR / "nexus-demo__pagekit-1.gold.jsonl"
    for run in ("run-a", "run-b"):  # solve and eval write trajectory.jsonl into each run's own folder
        (tmp_path / run).mkdir()
        (tmp_path / run / "trajectory.jsonl").write_bytes(gold.read_bytes())
    names = [load_conversation(tmp_path / run / "trajectory.jsonl").name for run in ("run-a", "run-b")]
    assert names == ["run-a", "run-b"]
    assert load_conversation(gold).name == "nexus-demo__pagekit-1.gold"


def test_other_shapes_of_a_trace_convert_or_are_one_error(tmp_path: Path) -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "fix "}, {"type": "text", "text": "it"}]}
    odd_calls = {"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "bash", "arguments": {"command": "pwd"}}},  # an object, not JSON text
        {"function": {"name": "bash", "arguments": "ls -l"}},  # not JSON: the command itself
        "not a call",
    ]}  # fmt: skip
    path = tmp_path / "odd.traj.json"
    path.write_text(json.dumps({"messages": [parts, odd_calls]}))
    user, reply = load_conversation(path).messages[1:]
    assert user["content"] == "fix it"
    assert "<parameter=cmd>pwd</parameter>" in reply["content"]
    assert "<parameter=cmd>ls -l</parameter>" in reply["content"]

    bad = {
        "latin.traj.json": b'\xff{"messages": []}',
        "ints.traj.json": b'{"messages": [1, 2]}',
        "content.traj.json": b'{"messages": [{"role": "user", "content": 5}]}',
        "calls.traj.json": b'{"messages": [{"role": "assistant", "content": "", "tool_calls": 3}]}',
        "lines.jsonl": b'{"type": "header"}\nnot json\n{"type": "footer"}\n',
    }
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(KVStoreError, match=name.replace(".", r"\.")):  # names the file, no other exception
            load_conversation(tmp_path / name)


def _eval_folder(out: Path, *names: str) -> Path:
    """An eval --out folder as `nexus-agent eval` leaves it: one run folder per task beside the batch's files."""
    for name in names:
        (out / f"nexus-demo__{name}").mkdir(parents=True)
        gold = GOLD_DIR / f"nexus-demo__{name}.gold.jsonl"
        (out / f"nexus-demo__{name}" / "trajectory.jsonl").write_bytes(gold.read_bytes())
        (out / f"nexus-demo__{name}" / "report.json").write_text("{}")
    (out / "predictions.jsonl").write_text('{"instance_id": "x"}\n')  # JSON lines, but not a conversation
    (out / "summary.json").write_text("{}")
    return out


def test_a_folder_gives_the_conversations_under_it(tmp_path: Path) -> None:
    out = _eval_folder(tmp_path / "eval", "iniconf-1", "csvkit-lite-1")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "demo__demo-1.traj.json").write_text(json.dumps(MINI_SWE))
    (tmp_path / "traces" / "notes.json").write_text("{}")
    files = conversation_files([out, tmp_path / "traces", TRAJECTORY])
    assert files == [
        out / "nexus-demo__csvkit-lite-1" / "trajectory.jsonl",  # sorted within a folder
        out / "nexus-demo__iniconf-1" / "trajectory.jsonl",
        tmp_path / "traces" / "demo__demo-1.traj.json",
        TRAJECTORY,  # a file stays itself, in its place
    ]
    assert [load_conversation(f).name for f in files[:2]] == ["nexus-demo__csvkit-lite-1", "nexus-demo__iniconf-1"]


def test_a_folder_does_not_follow_links_and_must_hold_a_conversation(tmp_path: Path) -> None:
    outside = _eval_folder(tmp_path / "elsewhere", "iniconf-1")
    runs = tmp_path / "runs"
    (runs / "linked").mkdir(parents=True)
    (runs / "linked" / "trajectory.jsonl").symlink_to(outside / "nexus-demo__iniconf-1" / "trajectory.jsonl")
    (runs / "folder").symlink_to(outside, target_is_directory=True)
    with pytest.raises(KVStoreError, match=r"runs: no conversations in this folder"):
        conversation_files([runs])


def test_every_recorded_call_of_a_real_trace_parses() -> None:
    root = shared_data_dir()
    if root is None:
        pytest.skip("shared data absent (set NEXUS_SHARED_DATA or check out ../shared beside the repository)")
    path = sorted((root / TRACES_DIR).glob("*.traj.json"))[0]
    raw = [m for m in json.loads(path.read_text())["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    replies = [m for m in load_conversation(path).messages if m["role"] == "assistant"]
    assert len(replies) >= len(raw) > 50
    for message, reply in zip(raw, replies, strict=False):
        command = json.loads(message["tool_calls"][0]["function"]["arguments"])["command"]
        assert parse_call(reply["content"]).params["cmd"] == command.strip()


@pytest.mark.slow  # end to end (subprocesses, a pty or a timeout): ~8-23 s
def test_bench_replay_compares_each_memory_with_the_full_cache(tmp_path: Path) -> None:
    model = save_tiny_chat_model(tmp_path / "model")
    out, png, txt = tmp_path / "replay.json", tmp_path / "replay.png", tmp_path / "replay.txt"
    args = ["bench", "replay", str(TRAJECTORY), "--model", str(model), "--dtype", "fp32", "--max-tokens", "2600"]
    specs = "full;full@protocol=re-prefill;streaming;nexus@selector=topk,protect=system"
    args += ["--specs", specs, "--budgets", "0.5,160"]
    args += ["--json", str(out), "--plot", str(png), "--table", str(txt)]
    result = CliRunner().invoke(app, args, env=os.environ | {"NEXUS_SHARED_DATA": str(tmp_path)})
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (conv,) = data["conversations"]
    assert conv["tokens"] <= 2600
    assert conv["replies"] >= 2
    assert conv["scored_tokens"] > 0
    runs = {(r["spec"], r["budget"]): r for r in data["runs"]}
    for (spec, _budget), r in runs.items():
        assert sum(t["tokens"] for t in r["turns"]) == conv["scored_tokens"]  # every reply token scored, once
        if spec.startswith("full"):  # the reference's computation (re-prefilled each turn or not): the same
            assert all(t["kl"] < 1e-4 for t in r["turns"])
            assert all(t["top1"] == t["tokens"] for t in r["turns"])
        else:  # the budget is honoured before every reply (budget + one block between forwards)
            assert all(t["held"] <= r["budget_tokens"] + 32 for t in r["turns"])
    assert sum(t["kl"] for t in runs[("streaming", 0.5)]["turns"]) > 0
    # 160 tokens cannot hold the protected system prompt: that run fails with the reason, the others go on
    (failed,) = data["failed"]
    assert failed["spec"] == "nexus@selector=topk,protect=system"
    assert "protect" in failed["error"]
    specs = {"full", "full@protocol=re-prefill", "streaming", "nexus@selector=topk,protect=system"}
    assert {row["spec"] for row in data["summary"]} == specs
    assert png.stat().st_size > 10_000
    assert "mean KL" in txt.read_text()
    assert "bench replay: model in float32," in txt.read_text()  # the dtype moves top-1: the table names it
    machine = data["config"]["machine"]  # bf16 figures are reproducible only on the CPU kind they name
    assert machine["torch"] == torch.__version__
    assert machine["device"]
    assert machine["threads"] >= 1
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


@pytest.mark.slow  # two calibration replays and two evicting replays of the tiny model: ~10 s
def test_calibrate_writes_a_profile_that_bench_replay_uses(tmp_path: Path) -> None:
    model = save_tiny_chat_model(tmp_path / "model")
    profile = tmp_path / "profile.pt"
    runs = _eval_folder(tmp_path / "eval", "csvkit-lite-1", "iniconf-1")  # an eval's --out: its runs calibrate
    failed = runs / "nexus-demo__pagekit-1"  # a task that stopped before its first reply
    failed.mkdir()
    header = (GOLD_DIR / "nexus-demo__pagekit-1.gold.jsonl").read_text().splitlines()[0]
    (failed / "trajectory.jsonl").write_text(header + "\n")
    args = ["calibrate", str(runs), "--model", str(model), "--dtype", "fp32", "--max-tokens", "2600"]
    args += ["-o", str(profile)]
    result = CliRunner().invoke(app, [*args, "--limit", "0"])
    assert result.exit_code != 0
    assert "give at least 1" in result.output
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "template tokens from 2 conversations" in result.output.replace("\n", " ")
    assert "left out 3/3: nexus-demo__pagekit-1" in result.output
    out = tmp_path / "replay.json"
    args = ["bench", "replay", str(TRAJECTORY), "--model", str(model), "--dtype", "fp32", "--max-tokens", "2600"]
    args += ["--specs", "nexus-agent", "--budgets", "0.5", "--profile", str(profile), "--json", str(out)]
    result = CliRunner().invoke(app, args, env=os.environ | {"NEXUS_SHARED_DATA": str(tmp_path)})
    assert result.exit_code == 0, result.output
    (run,) = json.loads(out.read_text())["runs"]
    assert run["spec"] == "nexus-agent+profile"
    assert run["profile_status"].startswith("matched")
    missing = CliRunner().invoke(app, [*args[:-4], "--profile", str(tmp_path / "no.pt")])
    assert missing.exit_code != 0
    assert "does not exist" in str(missing.exception)  # one line under `main`


def _default_memory_replay(tmp_path: Path, names: list[str]) -> tuple[list[str], Path]:
    """`bench replay` of the default memory on built-in tasks' gold conversations with the tiny model, at 50%; its
    arguments and the JSON file it writes."""
    model = save_tiny_chat_model(tmp_path / "model")
    traces = [str(GOLD_DIR / f"nexus-demo__{n}.gold.jsonl") for n in names]
    out = tmp_path / "replay.json"
    args = ["bench", "replay", *traces, "--model", str(model), "--dtype", "fp32", "--max-tokens", "2600"]
    return [*args, "--specs", "nexus-agent", "--budgets", "0.5", "--json", str(out)], out


@pytest.mark.slow  # four calibration replays and four evicting replays of the tiny model
def test_cross_fit_replays_each_fold_with_a_profile_calibrated_outside_it(tmp_path: Path) -> None:
    names = ["csvkit-lite-1", "iniconf-1", "invoicer-1", "semver-lite-1"]
    args, out = _default_memory_replay(tmp_path, names)
    result = CliRunner().invoke(app, [*args, "--cross-fit", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    first, second = data["config"]["cross_fit"]["profiles"]
    assert [first["fold"], second["fold"]] == [1, 2]
    assert data["config"]["specs"] == ["nexus-agent+profile"]
    stems = [f"nexus-demo__{n}.gold" for n in names]
    assert first["conversations"] == stems[:2]
    assert first["sources"] == stems[2:]  # calibrated outside the fold
    assert second["conversations"] == stems[2:]
    assert second["sources"] == stems[:2]
    runs = {r["conversation"]: r for r in data["runs"]}
    assert [runs[s]["profile"] for s in stems] == ["fold1.pt", "fold1.pt", "fold2.pt", "fold2.pt"]
    assert all(r["spec"] == "nexus-agent+profile" for r in runs.values())
    assert all(r["profile_status"].startswith("matched") for r in runs.values())
    for bad, message in (
        (["--cross-fit", "1"], "at least 2 folds"),
        (["--cross-fit", "3"], "at most half"),
        (["--cross-fit", "2", "--calibrate-on", "1"], "at least two conversations"),
        (["--cross-fit", "2", "--profile", str(out)], "give one of --profile, --cross-fit and --learn"),
    ):
        result = CliRunner().invoke(app, [*args, *bad])
        assert result.exit_code != 0, bad
        assert message in str(result.exception) + result.output, bad


@pytest.mark.slow  # one calibration of two conversations and six evicting replays of the tiny model
def test_learn_replays_the_first_conversations_bare_and_the_rest_with_their_profile(tmp_path: Path) -> None:
    """`--learn 2`: what the default memory gives a user whose runs learn their profile (solve, eval --warmup 2); a
    baseline beside it ignores profiles, so it keeps its plain name and the target check finds it."""
    names = ["csvkit-lite-1", "iniconf-1", "invoicer-1"]
    args, out = _default_memory_replay(tmp_path, names)
    args[args.index("nexus-agent")] = "nexus-agent;h2o"
    result = CliRunner().invoke(app, [*args, "--learn", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    stems = [f"nexus-demo__{n}.gold" for n in names]
    assert data["config"]["learn"]["sources"] == stems[:2]
    assert data["config"]["specs"] == ["nexus-agent+learned", "h2o"]
    assert sorted(r["spec"] for r in data["runs"]) == ["h2o"] * 3 + ["nexus-agent+learned"] * 3
    assert [(t["default"], t["best_baseline"]) for t in data["targets"]] == [("nexus-agent+learned", "h2o")]
    runs = {r["conversation"]: r for r in data["runs"] if r["spec"] == "nexus-agent+learned"}
    assert len(runs) == 3
    assert "profile" not in runs[stems[0]]
    assert "profile" not in runs[stems[1]]  # learned from, so run bare
    assert runs[stems[2]]["profile"] == "learned.pt"
    assert runs[stems[2]]["profile_status"].startswith("matched")
    unmarked = tmp_path / "unmarked.jsonl"  # the gold run without the tags around its issue
    text = (GOLD_DIR / "nexus-demo__csvkit-lite-1.gold.jsonl").read_text()
    unmarked.write_text(text.replace("<github_issue>", "").replace("</github_issue>", ""))
    for bad, message in (
        (["--learn", "1"], "the task statement of unmarked is not marked"),
        (["--learn", "3"], "fewer than the 3"),
        (["--learn", "2", "--cross-fit", "2"], "give one of"),
    ):
        given = [*args[:2], str(unmarked), *args[3:]] if bad == ["--learn", "1"] else args
        result = CliRunner().invoke(app, [*given, *bad])
        assert result.exit_code != 0, bad
        assert message in str(result.exception) + result.output, bad


@pytest.mark.slow  # one calibration of one conversation and two evicting replays of the tiny model
def test_learn_one_calibrates_the_first_conversation_with_its_statement_marked(tmp_path: Path) -> None:
    """`--learn 1`, what solve's and chat's learning give: the first trace's <pr_description> is the task's text."""
    model = save_tiny_chat_model(tmp_path / "model")
    traces = []
    for n, issue in enumerate(("the parser drops the last line", "dates before 1970 are rejected")):
        trace = json.loads(json.dumps(MINI_SWE))
        trace["messages"][1]["content"] = (
            f"<pr_description>{issue}</pr_description>\n<instructions>fix it</instructions>"
        )
        traces.append(tmp_path / f"demo__demo-{n}.traj.json")
        traces[-1].write_text(json.dumps(trace))
    out = tmp_path / "replay.json"
    args = ["bench", "replay", *map(str, traces), "--model", str(model), "--dtype", "fp32", "--max-tokens", "2600"]
    result = CliRunner().invoke(app, [*args, "--specs", "nexus-agent", "--budgets", "0.5", "--json", str(out),
                                      "--learn", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["config"]["learn"]["sources"] == ["demo__demo-0"]
    assert data["config"]["learn"]["profile"].endswith("from 1 conversation")
    runs = {r["conversation"]: r for r in data["runs"]}
    assert "profile" not in runs["demo__demo-0"]
    assert runs["demo__demo-1"]["profile"] == "learned.pt"
    assert runs["demo__demo-1"]["profile_status"].startswith("matched")
