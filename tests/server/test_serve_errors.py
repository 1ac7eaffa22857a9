"""The server's errors are its own (not the cache's): a bad serve setting is named by its field, a kvstore error
raised by a request's data becomes a 400, and the server's own refusals keep their status."""

from __future__ import annotations

import pytest

from kvstore.errors import KVStoreError, SettingError
from server.config import ServeConfig, request_failed, shutting_down
from server.errors import ServeError, ServeSettingError


def test_a_serve_error_is_not_a_kvstore_error() -> None:
    assert not issubclass(ServeError, KVStoreError)


def test_a_serve_error_is_not_a_value_error() -> None:
    assert not issubclass(ServeError, ValueError)  # an `except ValueError` around JSON parsing must not eat it


def test_a_bad_serve_setting_names_its_field() -> None:
    with pytest.raises(ServeSettingError) as info:
        ServeConfig(drain_s=float("inf"))
    assert info.value.setting == "drain_s"


def test_a_bad_serve_setting_names_no_flag() -> None:
    with pytest.raises(ServeSettingError) as info:
        ServeConfig(park="cloud")
    assert "--" not in str(info.value)


def test_a_kvstore_error_of_a_request_is_answered_400() -> None:
    assert request_failed(SettingError("budget", "'x': bad"), "prefill").status == 400


def test_a_kvstore_error_of_a_request_keeps_its_message() -> None:
    assert str(request_failed(KVStoreError("too long"), "prefill")) == "too long"


def test_a_serve_error_of_a_request_keeps_its_status() -> None:
    assert request_failed(shutting_down(), "decode").status == 503
