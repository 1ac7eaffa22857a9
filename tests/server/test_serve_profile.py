"""`serve --memory-profile`: every session whose opening carries the profile's template gets its weights, the
server reports the profile it runs with, and a bad profile stops the server before it listens."""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
import torch
from profilelib import conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, serve_config, tiny_chat_model, words

from kvstore.errors import KVStoreError
from kvstore.profiles.profile import MemoryProfile
from server.app import Server


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
    matched = [s for s in sessions if s.profile_status.startswith("matched")]
    assert len(matched) == 2 and all(s.cache.prior is not None for s in matched)
    (unmatched,) = [s for s in sessions if not s.profile_status.startswith("matched")]
    # another agent's opening: ranked by the profile's token prior (kvstore.profiles.tokens)
    assert unmatched.profile_status.startswith("opening does not carry the profile's template; token prior for its")
    assert unmatched.cache.prior is not None and bool((unmatched.cache.prior > 0).all())
    with urllib.request.urlopen(server.url + "/models") as r:
        assert json.load(r)["data"][0]["nexus"]["memory_profile"] == str(path)


@pytest.mark.parametrize("content", [None, b"not a profile"])
def test_a_missing_or_corrupt_profile_stops_the_server(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "profile.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(KVStoreError, match="profile"):
        Server(tiny_chat_model(), qwen_tokenizer(), serve_config(port=0, model="tiny-qwen3", profile=path))


def _post_profiles(server: Server, body: object, route: str = "/nexus/profiles") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.url + route, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_server_calibrates_a_profile_that_its_later_sessions_use(make_server, tmp_path: Path) -> None:
    store = tmp_path / "profiles"
    store.mkdir()
    server = make_server(budget=256, profile=store)
    with urllib.request.urlopen(server.url + "/models") as r:
        nexus = json.load(r)["data"][0]["nexus"]
    assert nexus["profile_directory"] is True and nexus["memory_profile"] is None  # an empty store: no profile yet
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    opening = conversation(words(40, "delta"), replies=1)[:2]
    client.chat.completions.create(model="tiny-qwen3", messages=opening, max_tokens=3, temperature=0)
    (before,) = [e.session for e in server.registry.entries.values()]
    assert before.cache.prior is None and before.profile_status == "no memory profile for this model"

    convs = [conversation(words(40, t)) for t in ("alpha", "beta")] + [[{"role": "user", "content": "hi"}]]
    status, answer = _post_profiles(server, {"conversations": convs, "sources": ["a", "b", "c"], "max_tokens": 2000})
    assert status == 200, answer
    assert answer["object"] == "nexus.profile" and answer["conversations"] == 2 and answer["left_out"] == ["c"]
    saved = store / answer["name"]
    assert saved.is_file() and answer["prefix_tokens"] > 0 and answer["suffix_tokens"] > 0
    sent = MemoryProfile.load_bytes(base64.b64decode(answer["profile"]))
    assert sent.digest() == MemoryProfile.load(saved).digest() and sent.meta["sources"] == ["a", "b", "c"]

    later = conversation(words(40, "epsilon"), replies=1)[:2]  # a new session of that agent uses it
    client.chat.completions.create(model="tiny-qwen3", messages=later, max_tokens=3, temperature=0)
    (after,) = [e.session for e in server.registry.entries.values() if e.session is not before]
    assert after.cache.prior is not None and after.profile_status.startswith("matched")
    assert after.profile_status.endswith(f"({answer['name']})")

    with urllib.request.urlopen(server.url + "/models") as r:  # now the store is in use
        assert json.load(r)["data"][0]["nexus"]["memory_profile"] == str(store)
    saved.unlink()  # installing the file sent back puts it there again, under the same name
    status, again = _post_profiles(server, {"profile": answer["profile"]})
    assert status == 200 and again["name"] == answer["name"] and saved.is_file()


def test_one_conversation_and_its_statement_make_the_profile_a_local_run_learns(make_server, tmp_path: Path) -> None:
    from kvstore.profiles.calibrate import calibrate, statement_variants

    store = tmp_path / "profiles"
    store.mkdir()
    server = make_server(budget=256, profile=store)
    task = words(40, "alpha")
    one = conversation(task)
    status, answer = _post_profiles(server, {"conversations": [one], "statement": task, "max_tokens": 2000})
    assert status == 200, answer
    served = MemoryProfile.load(store / answer["name"])
    variants = statement_variants(one, task)
    local = calibrate(tiny_chat_model(), qwen_tokenizer(), [one], max_tokens=2000, variants=variants)
    assert served.conversations == 1 and (served.prefix, served.suffix) == (local.prefix, local.suffix)
    assert torch.allclose(served.prefix_weight, local.prefix_weight, atol=1e-5)
    assert "alpha" not in qwen_tokenizer().decode(served.prefix + served.suffix)  # the task is not fixed text

    task = words(40, "beta")  # another task of the agent, from a client that learns only when none fits
    body = {"conversations": [conversation(task)], "statement": task, "max_tokens": 2000, "if_missing": True}
    stamp = (store / answer["name"]).stat().st_mtime_ns
    status, again = _post_profiles(server, body)
    assert status == 200 and again["kept"] is True and again["name"] == answer["name"] and "profile" not in again
    assert (store / answer["name"]).stat().st_mtime_ns == stamp and len(list(store.iterdir())) == 1
    (store / answer["name"]).unlink()
    status, again = _post_profiles(server, body)
    assert status == 200 and "kept" not in again and (store / again["name"]).is_file()


def test_the_profiles_endpoint_refuses_what_it_cannot_use(make_server, tmp_path: Path) -> None:
    no_dir = make_server()
    status, answer = _post_profiles(no_dir, {"conversations": []})
    assert status == 409 and "its memory profile 'auto'" in answer["error"]["message"]
    store = tmp_path / "profiles"
    store.mkdir()
    server = make_server(profile=store)
    other = MemoryProfile.load(save_tiny_profile(tmp_path / "tiny.pt"))
    other.identity = other.identity | {"num_layers": other.identity["num_layers"] + 1}
    other.prefix_weight = other.prefix_weight.repeat(2, 1, 1)[: other.identity["num_layers"]]
    other.suffix_weight = other.suffix_weight.repeat(2, 1, 1)[: other.identity["num_layers"]]
    foreign = io.BytesIO()
    other.save_to(foreign)
    for body, message in (
        ([], "either 'conversations' or 'profile'"),
        ({"conversations": [], "profile": ""}, "either 'conversations' or 'profile'"),
        ({"conversations": [[{"role": "user", "content": "x"}]]}, "at least two conversations"),
        ({"conversations": [], "statement": "x"}, "or of one with the task's 'statement'"),
        ({"conversations": [[{"role": "user", "content": "x"}]], "statement": 3}, "non-empty string"),
        ({"conversations": [[{"role": "user", "content": "x"}]], "statement": " "}, "non-empty string"),
        ({"conversations": [[{"role": "user", "content": "x"}]], "statement": "y"}, "is not in the first"),
        ({"conversations": [[{"role": "user", "content": "x y"}]], "statement": "y"}, "cannot calibrate"),
        ({"conversations": [[{"role": "user", "content": "x"}]] * 2, "if_missing": "yes"}, "true or false"),
        ({"conversations": [[{"role": "pilot", "content": "x"}]] * 2}, "unsupported role"),
        ({"conversations": [[{"role": "user", "content": "x"}]] * 2, "max_tokens": 0}, "positive integer"),
        ({"conversations": [[{"role": "user", "content": "x"}]] * 2, "sources": ["a"]}, "name each conversation"),
        ({"conversations": [[{"role": "user", "content": "x"}]] * 2}, "cannot calibrate"),
        ({"profile": "%%%"}, "base64"),
        ({"profile": base64.b64encode(b"not a profile").decode()}, "not a memory profile"),
        ({"profile": base64.b64encode(foreign.getvalue()).decode()}, "num_layers"),
    ):
        status, answer = _post_profiles(server, body)
        assert status == 400 and message in answer["error"]["message"], (body, answer)
    for route in ("/nexus/profiles", "/chat/completions"):
        status, answer = _post_profiles(server, b'{"conversations": [', route)
        assert status == 400 and answer["error"]["message"] == "the request body is not valid JSON"
    assert not list(store.iterdir())  # nothing was saved
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=2)  # fmt: skip
    assert reply.choices[0].message.content is not None  # the scheduler goes on serving


def test_a_calibration_makes_room_under_the_memory_cap_or_is_refused(make_server, tmp_path: Path) -> None:
    from kvstore.session.render import ChatRenderer
    from kvstore.session.teacher import plan

    store = tmp_path / "profiles"
    store.mkdir()
    convs = [conversation(words(40, t)) for t in ("alpha", "beta")]
    renderer = ChatRenderer(qwen_tokenizer())
    need = max(plan(c, renderer, 10**6).tokens for c in convs) * 512  # the tiny model: 512 bytes of K+V per token
    small = make_server(profile=store, memory_cap=need - 1)
    status, answer = _post_profiles(small, {"conversations": convs})
    assert status == 503 and "memory cap" in answer["error"]["message"] and not list(store.iterdir())

    server = make_server(profile=store, memory_cap=need + 8 * 1024, budget=128)
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    client.chat.completions.create(model="tiny-qwen3", messages=[{"role": "user", "content": words(300, "x")}],
                                   max_tokens=2, temperature=0)  # fmt: skip
    (idle,) = server.registry.entries.values()
    assert idle.session is not None and idle.held_bytes > 8 * 1024  # resident: the calibration does not fit beside it
    status, answer = _post_profiles(server, {"conversations": convs})
    assert status == 200, answer
    assert idle.parked is not None and (store / answer["name"]).is_file()  # parked to make room


def _rezipped(data: bytes, extra: dict[str, bytes]) -> bytes:
    """A profile file's archive written again with every record deflated, plus `extra` records."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        for name, content in extra.items():
            dst.writestr(f"{src.namelist()[0].split('/')[0]}/{name}", content)
    return out.getvalue()


def test_profile_uploads_are_limited_in_size_and_number(make_server, tmp_path: Path) -> None:
    store = tmp_path / "profiles"
    store.mkdir()
    server = make_server(profile=store, profile_max_bytes=2**20, max_profiles=1)
    profile = MemoryProfile.load(save_tiny_profile(tmp_path / "tiny.pt"))
    good = io.BytesIO()
    profile.save_to(good)
    assert len(good.getvalue()) < 2**20
    bomb = _rezipped(good.getvalue(), {"padding": bytes(64 * 2**20)})  # 64 MiB of zeros deflate to ~64 KiB
    assert len(bomb) < 2**20
    expanded = MemoryProfile.load(save_tiny_profile(tmp_path / "tiny.pt"))
    layers, heads = expanded.prefix_weight.shape[:2]
    expanded.prefix_weight = torch.zeros(1).expand(layers, heads, 2**20)  # saved as one float, read back as 2^22
    wide = io.BytesIO()
    torch.save(
        {
            "version": 1,
            "prefix": torch.zeros(1, dtype=torch.int64).expand(2**20),
            "prefix_weight": expanded.prefix_weight,
        },
        wide,
    )
    for data, message in (
        (bytes(2**20 + 1), "is 1048577 bytes"),
        (bomb, "inflates to"),
        (wide.getvalue(), "once expanded"),
    ):
        status, answer = _post_profiles(server, {"profile": base64.b64encode(data).decode()})
        assert status == 413 and message in answer["error"]["message"], answer
        assert "limit of 1048576 bytes" in answer["error"]["message"]
    assert not list(store.iterdir())
    status, answer = _post_profiles(server, {"profile": base64.b64encode(good.getvalue()).decode()})
    assert status == 200 and (store / answer["name"]).is_file()
    status, _ = _post_profiles(server, {"profile": base64.b64encode(good.getvalue()).decode()})
    assert status == 200  # the same profile again replaces itself
    other = MemoryProfile.load(save_tiny_profile(tmp_path / "tiny.pt"))
    other.prefix, other.prefix_weight = other.prefix[:-1], other.prefix_weight[..., :-1].contiguous()
    data = io.BytesIO()
    other.save_to(data)
    status, answer = _post_profiles(server, {"profile": base64.b64encode(data.getvalue()).decode()})
    assert status == 507 and "holds 1 profiles" in answer["error"]["message"], answer
    assert len(list(store.iterdir())) == 1


def test_a_calibration_from_more_conversations_than_the_cap_is_refused_before_any_is_read(
    make_server, tmp_path: Path
) -> None:
    store = tmp_path / "profiles"
    store.mkdir()
    server = make_server(profile=store, max_profile_conversations=2)
    convs = [conversation(words(40, t)) for t in ("alpha", "beta", "gamma")]
    status, answer = _post_profiles(server, {"conversations": convs})
    assert status == 400, answer
    assert answer["error"]["message"].startswith("'conversations' holds 3 conversations, more than this server")
    assert "(2, its max_profile_conversations: serve --max-profile-conversations)" in answer["error"]["message"]
    assert not list(store.iterdir())
    refused = 'nexus_requests_failed_total{cause="request_limit"} 1'
    assert refused in urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics").read().decode()
    status, answer = _post_profiles(server, {"conversations": convs[:2]})
    assert status == 200 and (store / answer["name"]).is_file()  # as many as the cap are taken
