"""A bad setting is named by its field, in the library's words: a Python caller reads `setting`, never a CLI flag."""

from __future__ import annotations

import pytest

from kvstore.defaults import parse_budget
from kvstore.errors import KVStoreError, SettingError
from kvstore.session.config import MemorySettings


def _raised(build) -> SettingError:
    with pytest.raises(SettingError) as info:
        build()
    return info.value


def test_a_bad_budget_names_the_budget_setting() -> None:
    assert _raised(lambda: parse_budget("abc")).setting == "budget"


def test_a_bad_budget_message_names_the_setting_not_a_flag() -> None:
    assert str(_raised(lambda: parse_budget("0"))).startswith("budget '0': give tokens per layer")


def test_a_bad_budget_message_names_no_flag() -> None:
    assert "--" not in str(_raised(lambda: parse_budget("abc")))


def test_a_bad_protect_names_the_protect_setting() -> None:
    assert _raised(lambda: MemorySettings(protect="bogus")).setting == "protect"


def test_a_bad_protect_message_names_no_flag() -> None:
    assert "--" not in str(_raised(lambda: MemorySettings(protect="bogus")))


def test_a_bad_protocol_names_the_protocol_setting() -> None:
    assert _raised(lambda: MemorySettings(protocol="sometimes")).setting == "protocol"


def test_a_setting_error_is_still_a_kvstore_error() -> None:
    assert isinstance(_raised(lambda: parse_budget("abc")), KVStoreError)
