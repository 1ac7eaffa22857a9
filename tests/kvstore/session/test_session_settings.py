"""The settings tree below a session: MemorySettings -> SessionConfig -> its CacheConfig (built once, its policy class
resolved once) -> the session's caches; and the policies, which read a cache config, never import its module."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from sessionlib import qwen_tokenizer, tiny_chat_model

import kvstore
from kvstore.cache.config import CacheConfig
from kvstore.errors import SettingError
from kvstore.policies.snapkv import SnapKVPolicy
from kvstore.session.config import MemorySettings, SessionConfig
from kvstore.session.session import Session

POLICIES_DIR = Path(kvstore.__file__).parent / "policies"


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


@pytest.mark.parametrize("path", sorted(POLICIES_DIR.glob("*.py")), ids=lambda p: p.name)
def test_a_policy_module_does_not_import_the_cache_config(path: Path) -> None:
    assert "kvstore.cache.config" not in _imported(path)


def test_a_session_config_resolves_its_policy_class() -> None:
    assert SessionConfig(policy="snapkv").cache.policy_type is SnapKVPolicy


def test_a_session_config_builds_its_budget_into_the_cache_config() -> None:
    assert SessionConfig(budget="25%").cache.budget == 0.25


def test_a_session_config_passes_its_cache_options() -> None:
    assert SessionConfig(cache_options={"block": 16}).cache.block == 16


def test_a_session_config_passes_its_chunk_size() -> None:
    assert SessionConfig(chunk_size=64).cache.chunk_size == 64


def test_a_chunk_size_cache_option_is_the_sessions_prefill_chunk_too() -> None:
    config = SessionConfig(chunk_size=512, cache_options={"chunk_size": 128})  # e.g. a replay spec's `@chunk_size=128`
    assert (config.chunk_size, config.cache.chunk_size) == (128, 128)


def test_a_session_config_applies_the_policy_names_variant_defaults() -> None:
    assert SessionConfig(policy="nexus-agent").cache.recent_share == 0.5


def test_replace_rebuilds_the_cache_config() -> None:
    assert dataclasses.replace(SessionConfig(seed=1), seed=7).cache.seed == 7


def test_a_saved_session_config_holds_no_cache_config() -> None:
    assert "cache" not in SessionConfig().to_dict()


def test_a_saved_session_config_reads_back_equal() -> None:
    config = SessionConfig(policy="h2o", budget=64, cache_options={"recent": 0})
    assert SessionConfig.from_dict(config.to_dict()) == config


def test_a_session_opens_its_cache_from_its_cache_config() -> None:
    config = SessionConfig(policy="snapkv", budget=64)
    assert Session(tiny_chat_model("qwen3", 4096), qwen_tokenizer(), config).cache.config is config.cache


def test_a_number_budget_is_checked_by_the_memory_settings() -> None:
    with pytest.raises(SettingError) as info:
        MemorySettings(budget=0)
    assert info.value.setting == "budget"


def test_a_cache_budget_error_names_the_budget_setting() -> None:
    with pytest.raises(SettingError) as info:
        CacheConfig(budget=1.5)
    assert info.value.setting == "budget"


def test_a_cache_budget_error_says_what_to_give() -> None:
    with pytest.raises(SettingError) as info:
        CacheConfig(budget=-3)
    assert str(info.value) == (
        "budget -3: give tokens per layer (e.g. 2048), a density in (0, 1] (e.g. 0.25 or 25%), or 'none'"
    )


@pytest.mark.parametrize("field", ["block", "chunk_size", "score_chunk", "observe_batch"])
def test_a_cache_count_error_names_its_setting(field: str) -> None:
    with pytest.raises(SettingError) as info:
        CacheConfig(**{field: 0})
    assert info.value.setting == field


def test_an_unknown_engine_names_the_engine_setting() -> None:
    with pytest.raises(SettingError) as info:
        CacheConfig(engine="turbo")
    assert info.value.setting == "engine"
