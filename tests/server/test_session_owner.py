"""Which sessions a conversation prefix may adopt (server.sessions): only an idle one, never one a client named,
and only one opened by the same client (its API key and OpenAI `user`), so that two clients whose conversations are
identical so far each keep their own session."""

from __future__ import annotations

import openai
from sessionlib import words


def ask(c: openai.OpenAI, messages: list[dict], **kw) -> tuple[str, str]:
    r = c.chat.completions.create(model="tiny-qwen3", messages=messages, max_tokens=6, temperature=0, **kw)
    return r.choices[0].message.content, r.model_extra["nexus"]["session_id"]


def test_identical_conversations_of_two_clients_keep_their_own_sessions(make_server) -> None:
    server = make_server()
    opening = [{"role": "user", "content": words(40, "same")}]
    for who in ({"api_key": "key-a"}, {"api_key": "key-b"}), ({"user": "alice"}, {"user": "bob"}):
        clients = [openai.OpenAI(base_url=server.url, api_key=w.get("api_key", "k"), max_retries=0) for w in who]
        extra = [{"user": w["user"]} if "user" in w else {} for w in who]
        first = [ask(c, opening, **x) for c, x in zip(clients, extra, strict=True)]
        assert first[0][0] == first[1][0] and first[0][1] != first[1][1]  # same reply (greedy), two sessions
        turn2 = [
            opening + [{"role": "assistant", "content": text}, {"role": "user", "content": "next"}] for text, _ in first
        ]
        later = [ask(c, m, **x) for c, m, x in reversed(list(zip(clients, turn2, extra, strict=True)))][::-1]
        assert [sid for _, sid in later] == [sid for _, sid in first]  # the second client asked first: still its own


def test_a_client_never_adopts_another_clients_session(make_server) -> None:
    server = make_server()
    a = openai.OpenAI(base_url=server.url, api_key="key-a", max_retries=0)
    b = openai.OpenAI(base_url=server.url, api_key="key-b", max_retries=0)
    opening = [{"role": "user", "content": words(40, "o")}]
    text, sid = ask(a, opening)
    turn2 = opening + [{"role": "assistant", "content": text}, {"role": "user", "content": "next"}]
    assert ask(b, turn2)[1] != sid  # b sent a's conversation: a session of its own, prefilled whole
    assert ask(a, turn2)[1] == sid  # a's session was left for a
