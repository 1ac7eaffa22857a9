"""The task's code names (kvstore.profiles.names, the default memory's `name_weight`): which words of a task's text
count, where their tokens are, that a session whose opening a profile matched keeps them, and that an opening no
profile matched has those of its first user message, on the tiny random Qwen3 with the real tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from profilelib import conversation, save_tiny_profile
from sessionlib import qwen_tokenizer, tiny_chat_model, words

from kvstore import Session, SessionConfig
from kvstore.cache.snapshot import export_state, restore_cache
from kvstore.profiles.names import name_positions, name_spans

ISSUE = (
    "JSONField values are shown as dict when readonly in the admin.\n"
    "The fix: a special case in django.contrib.admin.utils.display_for_field to call prepare_value() of the\n"
    "JSONField, in setUpTestData too; see django/contrib/admin/utils.py.\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/django/db/utils.py", line 84, in _execute\n'
    "    return self.cursor.execute(sql, params)\n"
    "sqlite3.OperationalError: database is locked\n"
)


def _names(text: str) -> list[str]:
    return [text[a:b] for a, b in name_spans(text)]


def test_code_names_are_found_once_and_prose_and_traceback_frames_are_not() -> None:
    assert _names(ISSUE) == [
        "JSONField",  # its second occurrence is not counted again
        "django.contrib.admin.utils.display_for_field",
        "prepare_value()",
        "setUpTestData",
        "django/contrib/admin/utils.py",
        "sqlite3.OperationalError",
    ]  # not "values", "Traceback", "The", nor the frame's path, function or source line


def test_prose_slashes_abbreviations_and_markup_tags_are_not_names() -> None:
    text = "<pr_description>\nSee e.g. the docs and/or write/load it, i.e. setup.cfg in /testbed.\n</pr_description>"
    assert _names(text) == ["setup.cfg", "/testbed"]
    assert _names("run tests/a/b or x/y.py, not a/b") == ["tests/a/b", "x/y.py"]


def test_the_positions_are_the_tokens_of_those_names_inside_the_span() -> None:
    tok = qwen_tokenizer()
    before = tok.encode("Fix this:\n")
    ids = before + tok.encode(ISSUE) + tok.encode("\nThanks")
    span = (len(before), len(before) + len(tok.encode(ISSUE)))
    runs = name_positions(tok, ids, span)
    assert runs and all(span[0] <= a < b <= span[1] for a, b in runs)
    assert all(runs[i][1] < runs[i + 1][0] for i in range(len(runs) - 1))  # separate runs, in order
    marked = "".join(tok.decode(ids[a:b]) for a, b in runs)
    for name in _names(ISSUE):
        assert name in marked
    assert "database is locked" not in marked and "cursor" not in marked
    assert name_positions(tok, ids, (0, len(before))) == []  # no name in "Fix this:"


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory) -> Path:
    return save_tiny_profile(tmp_path_factory.mktemp("profile") / "profile.pt")


def _opened(profile: str | None, **options) -> Session:
    config = SessionConfig(budget=256, profile=profile, cache_options={"chunk_size": 128, "selector": "topk"} | options)
    s = Session(tiny_chat_model(), qwen_tokenizer(), config)
    # a task far larger than the budget, its names in the middle, where the chunked prefill ranks them by what the
    # words after them attend
    task = words(250, "delta") + " fix django.views.debug.get_safe_settings() and cleanse_setting. " + words(400, "x")
    s.append(conversation(task, replies=1)[:2])
    s.prefill()
    return s


def _names_kept(s: Session) -> float:
    """The share of (layer, kv head, name token) held."""
    names = torch.cat([torch.arange(a, b) for a, b in s.cache.signals.names])
    held = [torch.isin(names, pos).float().mean() for layer in s.cache.layers for pos in layer.positions[0]]
    return float(torch.stack(held).mean())


def test_a_matched_opening_keeps_its_task_names(profile_file: Path) -> None:
    s = _opened(str(profile_file))
    assert s.cache.policy.settings.name_weight == 2.0  # the default memory's
    start, end = s.cache.signals.task_span
    runs = s.cache.signals.names
    assert runs and all(start <= a < b <= end for a, b in runs)
    text = "".join(s.tokenizer.decode(s.tokens[a:b]) for a, b in runs)
    assert "get_safe_settings()" in text and "cleanse_setting" in text and "delta" not in text
    ctx = s.cache.layers[0].score_context()
    bonus = s.cache.policy.score(ctx) - _opened(str(profile_file), name_weight=0.0).cache.policy.score(ctx)
    torch.testing.assert_close(bonus, 2.0 * ctx.names.float())
    without = _opened(str(profile_file), name_weight=0.0)
    without.cache.signals.names = runs  # the same positions, no bonus
    assert _names_kept(s) == 1.0 and _names_kept(without) < 1.0


def test_an_opening_no_profile_matched_has_the_names_of_its_first_user_message(profile_file: Path) -> None:
    system = {"role": "system", "content": "another agent, see agent.run_tool() and /etc/agent_config"}
    other = [system, {"role": "user", "content": "fix a.b_c() in pkg/mod.py " + words(300)}]
    for profile in (str(profile_file), None):  # a token prior, or nothing
        s = Session(tiny_chat_model(), qwen_tokenizer(), SessionConfig(budget=256, profile=profile))
        s.append(other[:1])  # the system prompt alone: the opening is not complete
        assert s.cache.signals.names == []
        s.append(other[1:])
        s.prefill()
        runs = s.cache.signals.names
        text = [s.tokenizer.decode(s.tokens[a:b]) for a, b in runs]
        assert [t.strip() for t in text] == ["a.b_c()", "pkg/mod.py"]  # not the system prompt's, nor im_start/end
        assert s.cache.layers[0].score_context().names is not None
    s.append([{"role": "user", "content": "now fix d.e_f()"}])  # a later user message adds none
    assert s.cache.signals.names == runs


def test_a_saved_session_keeps_its_names_and_an_older_save_has_none(profile_file: Path, tmp_path: Path) -> None:
    s = _opened(str(profile_file))
    s.save(tmp_path / "s.pt")
    back = Session.load(tmp_path / "s.pt", tiny_chat_model(), qwen_tokenizer())
    assert back.cache.signals.names == s.cache.signals.names and back.cache.config == s.cache.config
    tensors, meta = export_state(s.cache)
    del meta["names"], meta["config"]["name_weight"]  # saved before the option existed
    old = restore_cache(tiny_chat_model(), tensors, meta)
    assert old.signals.names == [] and old.config.settings.name_weight == 0.0
