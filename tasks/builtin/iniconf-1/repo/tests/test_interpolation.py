import pytest

from iniconf import Config, InterpolationError, ParserOptions


def test_same_section_reference():
    cfg = Config.from_string("[paths]\nroot = /srv\nlogs = ${root}/logs\n")
    assert cfg.get("paths", "logs") == "/srv/logs"


def test_cross_section_reference():
    cfg = Config.from_string("[server]\nhost = example.org\n[urls]\nhome = https://${server:host}/\n")
    assert cfg.get("urls", "home") == "https://example.org/"


def test_environment_reference():
    options = ParserOptions(environ={"APP_HOME": "/opt/app"})
    cfg = Config.from_string("[a]\nhome = ${env:APP_HOME}/data\n", options=options)
    assert cfg.get("a", "home") == "/opt/app/data"


def test_escaped_dollar():
    cfg = Config.from_string("[a]\nx = 1\ny = $${x}\n")
    assert cfg.get("a", "y") == "${x}"


def test_raw_get_skips_interpolation():
    cfg = Config.from_string("[a]\nx = 1\ny = ${x}\n")
    assert cfg.get("a", "y", raw=True) == "${x}"


def test_cycle_is_reported():
    cfg = Config.from_string("[a]\nx = ${y}\ny = ${x}\n")
    with pytest.raises(InterpolationError):
        cfg.get("a", "x")


def test_missing_reference():
    cfg = Config.from_string("[a]\nx = ${nope}\n")
    with pytest.raises(InterpolationError):
        cfg.get("a", "x")
