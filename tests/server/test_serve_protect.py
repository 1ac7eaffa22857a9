"""`serve --protect`: every session of the server protects its opening, so a budget that cannot hold it is a clear
HTTP 400, while the same request fits a server without protection."""

from __future__ import annotations

import openai
import pytest
from sessionlib import words

OPENING = [{"role": "system", "content": words(300)}, {"role": "user", "content": "hi"}]


def ask(server, messages: list[dict]):
    c = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    return c.chat.completions.create(model="tiny-qwen3", messages=messages, max_tokens=4, temperature=0)


def test_the_server_protects_what_it_is_told(make_server) -> None:
    plain = make_server(budget=128, protect="none")
    assert ask(plain, OPENING).choices[0].finish_reason in ("stop", "length")  # evicts the opening, as before
    guarded = make_server(budget=128, protect="system")
    with pytest.raises(openai.BadRequestError, match="cannot hold the protected opening"):
        ask(guarded, OPENING)
    roomy = make_server(budget=1024, protect="system+task")
    assert ask(roomy, OPENING).usage.prompt_tokens > 300
