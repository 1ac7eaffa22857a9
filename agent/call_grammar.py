"""The call format as a grammar: a reply the local model writes under it always parses (agent.parsing).

The grammar (Lark, in llguidance's dialect; kvstore.session.grammar compiles it) is built from the tool contract
(agent.tool_specs): a short thought on one line, then exactly one `<function=NAME>` call of one of the tools, its
required parameters first and then at most MAX_OPTIONAL of its optional ones (in the spec's order, none twice),
`</function>`, and the end of the reply. A parameter with fixed choices takes one of them. Any other value is ASCII
text (tabs and newlines included) without `</`, so its `</parameter>` is the first one the parser finds; a value
that is not `exact` starts with a visible character, so it is never empty.

Every free part is bounded in characters, and with ASCII text a token holds at least one character, so the longest
call fits the reply's `max_new_tokens` (`call_budget`): the reply ends with its call, never cut short. A value is
written in lines of at most LINE_CHARS characters: one bound per line keeps the grammar's mask cheap (a single
repetition bound of thousands of characters makes each step's mask tens of times slower).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.tool_specs import TOOLS, Param, ToolSpec
from kvstore.defaults import DEFAULT_MODEL
from kvstore.errors import SettingError
from kvstore.session.grammar import Constraint

MAX_OPTIONAL = 2  # optional parameters one call may give (file_editor's str_replace needs two: old_str and new_str)
THOUGHT_CHARS = 80  # most characters of the thought before the call (fewer when the reply's budget is small)
LINE_CHARS = 160  # most characters of one line of a value

_TEXT = r"(?:[\t -;=-~]|<{1,3}[\t -.0-;=-~])"  # one ASCII character of a line, or a run of '<' not followed by '/'
_FIRST = r"[!-;=-~]"  # the first character of a value that is not exact: visible, not '<'


def constrained_by_default(model: str) -> bool:
    """Whether replies follow the call grammar unless told otherwise: only for the offline default model, whose
    replies otherwise never parse (docs/constrained.md)."""
    return model == DEFAULT_MODEL


@dataclass(frozen=True)
class CallBudget:
    """How many characters each free part of a call may take."""

    thought: int  # characters of the thought before the call
    value: dict[str, int]  # tool name -> characters of one of its values


def call_grammar(budget: CallBudget, tools: dict[str, ToolSpec] = TOOLS) -> str:
    """The Lark grammar of one reply: a thought, then one call of one of `tools` (see the module docstring)."""
    calls = [_call_rules(i, spec, budget.value[spec.name]) for i, spec in enumerate(tools.values())]
    names = " | ".join(f"call_{i}" for i in range(len(calls)))
    head = [f"start: THOUGHT call\ncall: {names}", rf"THOUGHT: /[ -;=-~]{{0,{budget.thought}}}\n/"]
    return "\n".join(head + [line for rules in calls for line in rules])


def call_budget(max_new_tokens: int, count_tokens: Callable[[str], int], tools: dict[str, ToolSpec] = TOOLS):
    """Character bounds that make every call of `tools` fit `max_new_tokens` tokens: first the fixed text of the
    tool's longest call (tags, names, choices; counted with `count_tokens`, twice over for the tokens a choice may
    split), then the thought (at most THOUGHT_CHARS, a quarter of what the longest call leaves), then the tool's
    values, in equal shares."""
    fixed = {name: 2 * count_tokens(_skeleton(spec)) for name, spec in tools.items()}
    thought = min(THOUGHT_CHARS, (max_new_tokens - max(fixed.values())) // 4)
    value = {name: (max_new_tokens - fixed[name] - thought) // _values(spec) for name, spec in tools.items()}
    if thought < 0 or min(value.values()) < 1:
        raise SettingError(
            "max_new_tokens",
            f"{max_new_tokens}: a reply of that many tokens cannot hold every tool call under the call grammar (the "
            f"tags of the longest take about {max(fixed.values())}); raise it, or leave the call grammar off",
        )
    return CallBudget(thought=thought, value=value)


def call_constraint(tokenizer: Any, max_new_tokens: int, tools: dict[str, ToolSpec] = TOOLS):
    """The compiled call grammar for replies of at most `max_new_tokens` tokens (a kvstore.session.grammar
    Constraint; `.fresh()` one per reply)."""

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return Constraint.lark(call_grammar(call_budget(max_new_tokens, count, tools), tools), tokenizer)


def _call_rules(i: int, spec: ToolSpec, chars: int) -> list[str]:
    """The rules of tool i's call: call_i, its parameters p_i_j, optional tails o_i_k, values f_i / x_i."""
    required = [j for j, p in enumerate(spec.params) if p.required]
    optional = [j for j, p in enumerate(spec.params) if not p.required]
    rules = [f'p_{i}_{j}: "<parameter={p.name}>" {_value(i, p)}' for j, p in enumerate(spec.params)]
    body = " ".join(f"p_{i}_{j}" for j in required)
    if optional:
        rules += _optional_rules(i, optional)
        body += f" o_{i}_{MAX_OPTIONAL}?"
    rules.append(f'call_{i}: {_lit(f"<function={spec.name}>")} "\\n" {body} "</function>"')
    return rules + _value_rules(i, chars, any(p.exact and not p.choices for p in spec.params))


def _optional_rules(i: int, optional: list[int]) -> list[str]:
    """o_i_k: one to k optional parameters of tool i, in the spec's order, none twice (k = 1..MAX_OPTIONAL);
    o_i_k_j starts with parameter j and goes on with up to k - 1 later ones."""
    rules = []
    for k in range(1, MAX_OPTIONAL + 1):
        for n, j in enumerate(optional):
            later = " | ".join(f"o_{i}_{k - 1}_{m}" for m in optional[n + 1 :])
            rules.append(f"o_{i}_{k}_{j}: p_{i}_{j}" + (f" ({later})?" if k > 1 and later else ""))
        rules.append(f"o_{i}_{k}: " + " | ".join(f"o_{i}_{k}_{j}" for j in optional))
    return rules


def _value_rules(i: int, chars: int, exact: bool) -> list[str]:
    """Values of tool i of at most `chars` characters, in lines of at most LINE_CHARS, each line one lexeme ending in
    its newline or in `</parameter>` and the newline after it: f_i starts with a visible character, x_i (when the
    tool has exact parameters) is any text."""
    line = min(LINE_CHARS, chars)
    more = max(0, chars // (line + 1) - 1)  # lines before the last one
    lines = f"XL_{i}{{0,{more - 1}}} " if more > 1 else ""
    rules = [
        f"f_{i}: FE_{i}" + (f" | FL_{i} {lines}XE_{i}" if more else ""),
        rf"FL_{i}: /{_FIRST}{_TEXT}{{0,{line - 1}}}\n/",
        rf"FE_{i}: /{_FIRST}{_TEXT}{{0,{line - 1}}}<\/parameter>\n/",
        rf"XE_{i}: /{_TEXT}{{0,{line}}}<\/parameter>\n/",
    ]
    if exact:
        rules.append(f"x_{i}: " + (f"XL_{i}{{0,{more}}} " if more else "") + f"XE_{i}")
    if exact or more > 1:
        rules.append(rf"XL_{i}: /{_TEXT}{{0,{line}}}\n/")
    return rules


def _value(i: int, p: Param) -> str:
    if p.choices:
        return "(" + " | ".join(_lit(c) for c in p.choices) + ') "</parameter>\\n"'
    return f"x_{i}" if p.exact else f"f_{i}"


def _lit(text: str) -> str:
    """A Lark string literal (JSON's escapes)."""
    return json.dumps(text)


def _longest(spec: ToolSpec) -> list[Param]:
    """The parameters of the longest call of `spec`: the required ones and the optional ones with the longest names."""
    optional = sorted((p for p in spec.params if not p.required), key=lambda p: -len(p.name))
    return [p for p in spec.params if p.required] + optional[:MAX_OPTIONAL]


def _skeleton(spec: ToolSpec) -> str:
    """The fixed text of the longest call of `spec` (no thought, empty values, the longest choices)."""
    tags = "".join(f"<parameter={p.name}>{max(p.choices, key=len, default='')}</parameter>\n" for p in _longest(spec))
    return f"\n<function={spec.name}>\n{tags}</function>"


def _values(spec: ToolSpec) -> int:
    """The most free-text values one call of `spec` holds (at least 1: a share for a tool without any is harmless)."""
    required = sum(p.required and not p.choices for p in spec.params)
    optional = sum(not p.required and not p.choices for p in spec.params)
    return max(1, required + min(MAX_OPTIONAL, optional))
