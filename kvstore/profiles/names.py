"""The code names a task's text gives: what the agent's replies restate after the first long tool output.

An agent restates the names of its task (`django.contrib.admin.utils.display_for_field`, `setUpTestData`,
`get_safe_settings()`) in the reply that follows its first look at the repository, often a tool output about as long
as the memory's budget. By then the chunked prefill has ranked them by what the text after them attended, and they
were gone (docs/memory.md, "The task's names"). A session whose opening a memory profile matched knows where the
task's text lies (SessionSignals.task_span); without a matched profile the task is somewhere in the first user
message, and all of that message counts. These are the positions of that text's names, which the default memory
gives `name_weight` on top of its score.

A code name is a run of identifier characters that is dotted (`a.b`), holds an underscore (`create_superuser`), has a
capital after its first letter with a lowercase letter somewhere (`setUpTestData`, `JSONField`), ends in a call's
`()`, or is a path (a slash first, two slashes, or one and a dot: `/testbed`, `django/db/utils.py`). Not prose's
`e.g`, `and/or` or `write/load`, nor a markup tag's name (`<pr_description>`, `</instructions>`). Only each name's
first occurrence counts, and nothing on a traceback's frame lines (`File "...", line N, in f` and the source line
under it): machine output that repeats its paths.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_PATH = r"[\w.-]*/[\w./-]*\w"
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?"
_WORD = r"[A-Za-z_]\w*(?:\(\))?"
_CANDIDATE = re.compile(f"{_PATH}|{_DOTTED}|{_WORD}")
_FRAME = re.compile(r'^[ \t]*File "[^\n]*\n?(?:[^\n]*\n?)?', re.M)  # a frame line and the source line under it


def is_code_name(word: str) -> bool:
    """Whether a word of text (a match of the candidates above) names code rather than being prose."""
    bare = word.removesuffix("()")
    mixed_case = any(c.isupper() for c in bare[1:]) and any(c.islower() for c in bare)
    path = "/" in word and (word.startswith("/") or word.count("/") > 1 or "." in word)
    dotted = "." in bare and "/" not in bare and max(len(part) for part in bare.split(".")) > 1  # not `e.g`
    return path or dotted or "_" in bare.strip("_") or word.endswith("()") or mixed_case


def frame_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the traceback frames in `text`: each `File "...", line N, in f` line with the
    source line under it."""
    return [m.span() for m in _FRAME.finditer(text)]


def name_spans(text: str, first: bool = True, frames: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """[start, end) character spans of the code names in `text`: each name's first occurrence only (first), none
    that starts inside `frames` (None: the text's traceback frames, `frame_spans`); research/task_names.py measured
    the other choices."""
    frames = frame_spans(text) if frames is None else frames
    seen: set[str] = set()
    spans = []
    for m in _CANDIDATE.finditer(text):
        word = m.group()
        tag = text.endswith("<", 0, m.start()) or text.endswith("</", 0, m.start())  # a markup tag's name
        if tag or (first and word in seen) or not is_code_name(word) or any(a <= m.start() < b for a, b in frames):
            continue
        seen.add(word)
        spans.append(m.span())
    return spans


def name_positions(tokenizer, ids: Sequence[int], span: tuple[int, int], **rules) -> list[tuple[int, int]]:
    """[start, end) runs of the positions in `span` of `ids` whose tokens overlap a code name (`name_spans` with
    `rules`) of the text they decode to."""
    return text_runs(tokenizer, ids, span, lambda text: name_spans(text, **rules))


def text_runs(
    tokenizer, ids: Sequence[int], span: tuple[int, int], find: Callable[[str], list[tuple[int, int]]]
) -> list[tuple[int, int]]:
    """[start, end) runs of the positions in `span` of `ids` whose tokens overlap a character span `find` gives (in
    order, not overlapping) of the text they decode to. Each token is decoded alone: a character a token splits only
    shifts the offsets after it by its pieces. Special tokens (a chat template's `<|im_start|>`) decode to nothing."""
    start, end = span
    pieces = tokenizer.batch_decode([[int(t)] for t in ids[start:end]], skip_special_tokens=True)
    bounds, at = [], 0
    for piece in pieces:
        bounds.append((at, at + len(piece)))
        at += len(piece)
    marked = [False] * len(pieces)
    i = 0
    for a, b in find("".join(pieces)):
        while i < len(bounds) and bounds[i][1] <= a:
            i += 1
        j = i
        while j < len(bounds) and bounds[j][0] < b:
            marked[j] = True
            j += 1
    runs: list[tuple[int, int]] = []
    for k, on in enumerate(marked):
        if not on:
            continue
        if runs and runs[-1][1] == start + k:
            runs[-1] = (runs[-1][0], start + k + 1)
        else:
            runs.append((start + k, start + k + 1))
    return runs
