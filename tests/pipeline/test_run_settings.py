"""A run's and chat's settings built once (pipeline.config): chat's defaults declared beside a run's, chat's options
into one RunConfig, and the session a run opens built from its memory settings as they are."""

from __future__ import annotations

from kvstore.defaults import DEFAULT_SESSION_BUDGET
from kvstore.session.config import MemorySettings
from pipeline.config import CHAT_MAX_NEW_TOKENS, CHAT_MAX_STEPS, RunConfig, chat_config, memory_conflicts, run_memory


def test_a_run_session_takes_the_run_budget() -> None:
    assert RunConfig(memory=run_memory(policy="snapkv", budget="64")).session_config().cache.budget == 64


def test_a_run_session_takes_the_run_policy() -> None:
    assert RunConfig(memory=run_memory(policy="snapkv")).session_config().policy == "snapkv"


def test_chat_takes_its_own_step_limit() -> None:
    assert chat_config().max_steps == CHAT_MAX_STEPS


def test_chat_takes_its_own_reply_length() -> None:
    assert chat_config().max_new_tokens == CHAT_MAX_NEW_TOKENS


def test_chat_without_a_budget_takes_the_session_default() -> None:
    assert chat_config(budget=None).memory.budget == DEFAULT_SESSION_BUDGET


def test_chat_budget_none_never_evicts() -> None:
    assert chat_config(budget="none").memory.budget is None


def test_chat_budget_text_is_parsed_once() -> None:
    assert chat_config(budget="25%").memory.budget == 0.25


def test_chat_seed_reaches_the_memory() -> None:
    assert chat_config(seed=9).memory.seed == 9


def test_chat_learns_only_the_default_memory_on_a_local_model() -> None:
    assert chat_config(policy="snapkv", learn=True).learn is False


def test_chat_learns_the_default_memory() -> None:
    assert chat_config(learn=True, profile="none").learn is True


def test_a_resumed_chat_keeps_its_profile_over_auto() -> None:
    # a model with no shipped profile: the default (builtin) then resolves to none, as auto would not
    assert chat_config(profile="auto", resume=True, model="some/other-model").memory.profile is None


def test_a_resume_conflict_names_the_setting_that_differs() -> None:
    saved = MemorySettings(budget=512)
    assert memory_conflicts(chat_config(budget="1024").memory, saved, ["budget"]) == {"budget": (1024, 512)}


def test_a_resume_conflict_leaves_out_the_device() -> None:
    saved = MemorySettings(device="cpu")
    assert memory_conflicts(MemorySettings(device="cuda"), saved, ["device"]) == {}
