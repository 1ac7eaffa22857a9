"""`serve --memory-profile`: every session whose opening carries the profile's template gets its weights, the
server reports the profile it runs with, and a bad profile stops the server before it listens."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import openai
import pytest
from profilelib import conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore.errors import KVStoreError
from server.app import Server
from server.config import ServeConfig


def test_every_matching_session_of_the_server_uses_the_profile(make_server, tmp_path: Path) -> None:
    path = save_tiny_profile(tmp_path / "profile.pt")
    server = make_server(budget=256, profile=path)
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    for task in ("delta", "epsilon"):  # tasks the profile never saw, inside its template
        opening = conversation(words(40, task), replies=1)[:2]  # system prompt + task
        client.chat.completions.create(model="tiny-qwen3", messages=opening, max_tokens=3, temperature=0)
    other = [{"role": "system", "content": "another agent"}, {"role": "user", "content": words(200, "q")}]
    client.chat.completions.create(model="tiny-qwen3", messages=other, max_tokens=3, temperature=0)
    sessions = [e.session for e in server.registry.entries.values()]
    matched = [s for s in sessions if s.cache.prior is not None]
    assert len(matched) == 2 and all(s.profile_status.startswith("matched") for s in matched)
    assert [s.profile_status for s in sessions if s.cache.prior is None] == [
        "opening does not carry the profile's template"
    ]
    with urllib.request.urlopen(server.url + "/models") as r:
        assert json.load(r)["data"][0]["nexus"]["memory_profile"] == str(path)


@pytest.mark.parametrize("content", [None, b"not a profile"])
def test_a_missing_or_corrupt_profile_stops_the_server(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "profile.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(KVStoreError, match="profile"):
        Server(tiny_chat_model(), qwen_tokenizer(), ServeConfig(port=0, model="tiny-qwen3", profile=path))
