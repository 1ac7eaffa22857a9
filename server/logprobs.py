"""OpenAI's `logprobs.content` from a reply's records (kvstore.session.reply.ReplyInProgress.logprobs): each token
with its text, bytes and log-probability, and its most likely alternatives."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from transformers.convert_slow_tokenizer import bytes_to_unicode

FLOOR = -9999.0  # OpenAI's log-probability of a token the distribution excludes (JSON has no -inf)


def logprob_content(records: list[tuple[int, float, list[tuple[int, float]]]], tokenizer) -> list[dict[str, Any]]:
    """OpenAI's logprobs.content from a reply's (token, logprob, [(id, logprob), ...]) records (a token the
    distribution excludes, e.g. by logit_bias -100 or a constraint, gets OpenAI's floor of -9999.0, not -inf)."""

    def entry(token: int, logprob: float) -> dict[str, Any]:
        raw = token_bytes(tokenizer, token)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": max(logprob, FLOOR), "bytes": list(raw)}

    return [entry(t, lp) | {"top_logprobs": [entry(i, v) for i, v in top]} for t, lp, top in records]


def token_bytes(tokenizer, token: int) -> bytes:
    """The bytes a token stands for (byte-level BPE pieces mapped back to bytes; else its decoded text)."""
    piece = tokenizer.convert_ids_to_tokens(token)
    if piece in getattr(tokenizer, "added_tokens_encoder", {}):
        return piece.encode()
    try:
        return bytes(_byte_decoder()[c] for c in piece)
    except (KeyError, TypeError):
        return tokenizer.decode([token], skip_special_tokens=False).encode()


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:

    return {c: b for b, c in bytes_to_unicode().items()}
