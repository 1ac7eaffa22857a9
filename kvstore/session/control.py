"""Content is text: the strings of a conversation (every message's content, tool calls and their arguments, tool
specs) never become the model's control tokens; only the chat template's own text does.

A tokenizer turns the text of a special token (`<|im_start|>`, `<|im_end|>`, ...) into that token wherever it
appears, so a rendered conversation tokenized whole let a client forge a system or assistant turn inside its own
message (issue 61: 21 tokens against 51 for the same text spelled out). So before the template runs, each special
token's text inside a conversation's strings is replaced by a mark (private-use characters and its index); the
rendered text is then tokenized piece by piece: the template's pieces with special tokens, each mark as the
token's text spelled out (`split_special_tokens`). The private-use characters themselves are marked too, so a mark
in the rendered text always comes from masking and a client's text round-trips exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

OPEN, CLOSE = "\ue000", "\ue001"  # private-use characters around a mark's index
_MARK = re.compile(f"{OPEN}(\\d+){CLOSE}")


class ControlText:
    """Masks a tokenizer's special-token texts in a conversation and splits rendered text back into pieces."""

    def __init__(self, tokenizer) -> None:
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        special = {t.content for t in decoder.values() if t.special and t.content}
        self.texts = [OPEN, CLOSE, *sorted(special, key=len, reverse=True)]  # longest first: no prefix wins
        self._index = {t: i for i, t in enumerate(self.texts)}
        self._find = re.compile("|".join(map(re.escape, self.texts)))

    def mask(self, value: Any) -> Any:
        """`value` (a string, or lists and dicts of them, e.g. messages) with every special token's text marked;
        dict keys and non-string values are kept as they are."""
        if isinstance(value, str):
            return self._find.sub(lambda m: f"{OPEN}{self._index[m.group()]}{CLOSE}", value)
        if isinstance(value, dict):
            return {k: self.mask(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask(v) for v in value]
        return value

    def unmask(self, text: str) -> str:
        """Rendered text as a reader sees it: every mark back to the text it stands for."""
        return _MARK.sub(lambda m: self.texts[int(m.group(1))], text)

    def pieces(self, text: str) -> Iterator[tuple[bool, str]]:
        """(is content's text, piece) in order: the template's text between marks, and each mark's text."""
        at = 0
        for m in _MARK.finditer(text):
            if m.start() > at:
                yield False, text[at : m.start()]
            yield True, self.texts[int(m.group(1))]
            at = m.end()
        if at < len(text):
            yield False, text[at:]
