import pytest

from iniconf import Config, ConfigError

TYPED = """\
[t]
workers = 4
ratio = 0.75
debug = yes
verbose = off
hosts = a.example, b.example,
    c.example
timeout = 1h30m
poll = 250ms
cache = 512KiB
bad = many
"""


@pytest.fixture
def cfg():
    return Config.from_string(TYPED)


def test_int_float(cfg):
    assert cfg.getint("t", "workers") == 4
    assert cfg.getfloat("t", "ratio") == 0.75


def test_booleans(cfg):
    assert cfg.getboolean("t", "debug") is True
    assert cfg.getboolean("t", "verbose") is False


def test_list(cfg):
    assert cfg.getlist("t", "hosts") == ["a.example", "b.example", "c.example"]


def test_durations(cfg):
    assert cfg.getduration("t", "timeout") == 5400
    assert cfg.getduration("t", "poll") == 0.25


def test_size(cfg):
    assert cfg.getsize("t", "cache") == 512 * 1024


def test_conversion_error_names_line(cfg):
    with pytest.raises(ConfigError) as info:
        cfg.getint("t", "bad")
    assert "line 11" in str(info.value)


def test_typed_fallback(cfg):
    assert cfg.getint("t", "missing", fallback=7) == 7
