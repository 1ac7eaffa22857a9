"""A run's bad setting is named by its RunConfig field for a Python caller; the CLI names it by its flag."""

from __future__ import annotations

import pytest

from pipeline.config import RunConfig
from pipeline.errors import RunError, RunSettingError


def _raised(**settings) -> RunSettingError:
    with pytest.raises(RunSettingError) as info:
        RunConfig(**settings)
    return info.value


def test_a_bad_call_format_names_its_field() -> None:
    assert _raised(call_format="json").setting == "call_format"


def test_a_bad_call_format_names_no_flag() -> None:
    assert "--" not in str(_raised(call_format="json"))


def test_a_bad_step_limit_names_its_field() -> None:
    assert _raised(max_steps=0).setting == "max_steps"


def test_a_run_setting_error_is_still_a_run_error() -> None:
    assert isinstance(_raised(workers=0), RunError)


@pytest.mark.parametrize(
    "field,value", [("temperature", -0.5), ("temperature", float("nan")), ("command_timeout", 0), ("test_timeout", -1)]
)
def test_a_bad_temperature_or_timeout_names_its_field(field, value) -> None:
    assert _raised(**{field: value}).setting == field
