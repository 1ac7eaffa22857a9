"""The code names of the task's text (issue 64, with-profile later replies): how the default's `name_weight` was
chosen.

After the first tool output about as long as the budget (`ls -la` of the repository, ~1,000 tokens), replies restate
what the task names: `django.contrib.admin.utils.display_for_field`, `SafeExceptionReporterFilter.get_safe_settings()`,
`setUpTestData`. Their tokens sit past the task's head, in text the chunked prefill ranked by what the text after it
attends, and the flood of tool output evicts them. The product now finds them (kvstore.profiles.names) and gives them
`name_weight`; policy `nexus-agent-names` here is that default with the rules it was chosen among:
- `name_frames`: count the names on a traceback's frame lines too (the product skips them);
- `name_first`: a name's first occurrence only (the product's rule) or every one;
- `name_cap`: the first this many name tokens only (0: all, the product's rule);
- `name_wait`: the bonus only once the first reply has been seen (the product gives it from the opening on);
- `name_outer`: the names on the first this many frames of each traceback count too (the outermost calls: the
  test's or the user's code, which replies restate);
- `name_inner`: the names on the last this many frames of each traceback count too (where the error was raised,
  which a first reply names: "the error is in `brain_builtin_inference.py`, `_infer_str_format_call`, line 956");
- `code_weight`: a bonus for every token of the task's code lines too (an import, a class or def line, a `>>>`
  prompt, an assignment, an indented line; not a traceback's frames, not Trac's "(last modified by ...)"), which
  replies copy into their reproduction scripts.
Its `name_weight` replaces the product's bonus (the product's own term is turned off under it).

The policy reads the positions from the session; this script runs `nexus-agent` with the session patched to hand them
over once the opening is in (research/opening-issue64.md, section 6):

    python research/task_names.py bench replay TRACES --system agent --profile builtin-v2-smollm2-135m.pt \\
        --specs 'nexus-agent-names@name_weight=2,name_frames=true' ...
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kvstore.policies.base import ScoreContext  # noqa: E402
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings  # noqa: E402
from kvstore.profiles.names import frame_spans, name_positions, name_spans, text_runs  # noqa: E402
from research.session_hooks import once_task_is_in  # noqa: E402

CODE_LINE = re.compile(
    r"^(?:[ \t]*(?:from [\w.]+ import |import [\w.]|class \w|def \w|>>> |@\w|return\b)|[ \t]+\S"
    r"|[ \t]*[\w.\[\]\"']+[ \t]*=[^=]).*$",
    re.M,
)


def outer_frame_names(text: str, outer: int, inner: int = 0, whole: bool = False) -> list[tuple[int, int]]:
    """The product's names (first occurrences, not on frames), plus those on the first `outer` and the last `inner`
    frames of each traceback (counted from its "Traceback (most recent call last):" line): the test's or the user's
    own calls, which replies restate, before the library's; and where the error was raised, which replies name
    first. With `whole`, every character of those frames counts (the line number and the source line too), not
    only their names."""
    starts = [m.start() for m in re.finditer(r"Traceback \(most recent call last\):", text)]
    tracebacks: dict[int | None, list[tuple[int, int]]] = {}
    for a, b in frame_spans(text):
        tracebacks.setdefault(max((s for s in starts if s < a), default=None), []).append((a, b))
    frames = [f for fs in tracebacks.values() for i, f in enumerate(fs) if outer <= i < len(fs) - inner]
    if not whole:
        return name_spans(text, frames=frames)
    kept = sorted(set(frame_spans(text)) - set(frames))
    return sorted(name_spans(text, frames=frames + kept) + kept)


def code_lines(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the code lines of `text` (CODE_LINE), outside traceback frames."""
    frames = frame_spans(text)
    return [
        m.span()
        for m in CODE_LINE.finditer(text)
        if "(last modified by" not in m.group() and not any(a <= m.start() < b for a, b in frames)
    ]


@dataclass
class TaskNamesSettings(NexusAgentSettings):
    name_frames: bool = False  # count names on a traceback's frame lines too
    name_first: bool = True  # only a name's first occurrence in the task
    name_cap: int = 0  # the first this many name tokens only (0: all)
    name_wait: bool = False  # the bonus only once a reply query has been seen (the opening's prefill ranks without)
    code_weight: float = 0.0  # a bonus for each token of the task's code lines
    name_outer: int = 0  # names on the first this many frames of each traceback count too
    name_inner: int = 0  # names on the last this many frames of each traceback count too
    frame_whole: bool = False  # with name_outer / name_inner: every token of those frames, not only their names


class TaskNamesPolicy(NexusAgentPolicy):
    name = "nexus-agent-names"
    settings_type = TaskNamesSettings

    def __init__(self, config, settings=None) -> None:
        super().__init__(config, settings)
        self.names: torch.Tensor | None = None  # positions, set by the patched session (`patch_session`)
        self.code: torch.Tensor | None = None  # the code lines' positions, likewise
        self.reads_names = False  # the product's own names term stays off: this policy's rules replace it

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        score = super().score(ctx)
        if self.names is None or ctx.task_span is None or self.settings.name_weight == 0:
            return score
        mask = torch.isin(ctx.positions, self.names.to(ctx.positions.device)).to(score.dtype)
        if self.settings.name_wait:
            mask = mask * (ctx.state["reply_seen"].flatten(1).amax(1) > 0).to(score.dtype)[:, None, None]
        score = score + self.settings.name_weight * mask
        if self.code is not None and self.settings.code_weight > 0:
            code = torch.isin(ctx.positions, self.code.to(ctx.positions.device)).to(score.dtype)
            score = score + self.settings.code_weight * code
        return score

    def positions(self, tokenizer, ids: list[int], span: tuple[int, int]) -> torch.Tensor:
        rules = {"first": self.settings.name_first, "frames": [] if self.settings.name_frames else None}
        outer, inner, whole = self.settings.name_outer, self.settings.name_inner, self.settings.frame_whole
        if outer > 0 or inner > 0:
            runs = text_runs(tokenizer, ids, span, lambda text: outer_frame_names(text, outer, inner, whole))
        else:
            runs = name_positions(tokenizer, ids, span, **rules)
        found = [p for a, b in runs for p in range(a, b)]
        cap = self.settings.name_cap
        return torch.tensor(found[:cap] if cap > 0 else found, dtype=torch.long)


def patch_session() -> None:
    """Hand a TaskNamesPolicy the code-name positions of its session's task text once the opening is in."""

    def fill(session, policy: TaskNamesPolicy, span: tuple[int, int]) -> None:
        policy.names = policy.positions(session.tokenizer, session.tokens, span)
        runs = text_runs(session.tokenizer, session.tokens, span, code_lines)
        policy.code = torch.tensor([p for a, b in runs for p in range(a, b)], dtype=torch.long)

    once_task_is_in(TaskNamesPolicy, "names", fill)


if __name__ == "__main__":
    import research.policies  # noqa: F401  (registers research.task_names's class, which this module is not)
    from cli.app import main
    from research.task_names import patch_session as patch

    patch()
    sys.argv[0] = "nexus-agent"
    main()
