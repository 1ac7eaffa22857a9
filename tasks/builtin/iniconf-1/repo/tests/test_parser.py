import pytest

from iniconf import Config, DuplicateOptionError, DuplicateSectionError, NoOptionError, NoSectionError, ParseError

SAMPLE = """\
# service configuration
[DEFAULT]
timeout = 30

[server]
host = 0.0.0.0
port: 8080            ; the public port
motd = "  Welcome!  "
banner =
    first line
    second line

[database]
url = postgres://db.internal/app
timeout = 5
"""


def test_sections_and_values():
    cfg = Config.from_string(SAMPLE)
    assert cfg.sections() == ["server", "database"]
    assert cfg.get("server", "host") == "0.0.0.0"
    assert cfg.get("server", "port") == "8080"


def test_inline_comment_is_removed():
    cfg = Config.from_string("[a]\nport = 8080  # admin\nname = x;y\n")
    assert cfg.get("a", "port") == "8080"
    assert cfg.get("a", "name") == "x;y"


def test_quotes_keep_spaces():
    assert Config.from_string(SAMPLE).get("server", "motd") == "  Welcome!  "


def test_multiline_value():
    assert Config.from_string(SAMPLE).get("server", "banner") == "\nfirst line\nsecond line"


def test_defaults_are_inherited_and_overridden():
    cfg = Config.from_string(SAMPLE)
    assert cfg.get("server", "timeout") == "30"
    assert cfg.get("database", "timeout") == "5"


def test_keys_are_case_insensitive():
    assert Config.from_string("[a]\nName = x\n").get("a", "NAME") == "x"


def test_missing_section_and_option():
    cfg = Config.from_string(SAMPLE)
    with pytest.raises(NoSectionError):
        cfg.get("nope", "x")
    with pytest.raises(NoOptionError):
        cfg.get("server", "nope")
    assert cfg.get("server", "nope", fallback="d") == "d"


def test_duplicates_are_errors_in_strict_mode():
    with pytest.raises(DuplicateSectionError):
        Config.from_string("[a]\nx=1\n[a]\ny=2\n")
    with pytest.raises(DuplicateOptionError) as info:
        Config.from_string("[a]\nx=1\nx=2\n")
    assert info.value.lineno == 3


def test_option_before_section():
    with pytest.raises(ParseError) as info:
        Config.from_string("x = 1\n[a]\n")
    assert info.value.lineno == 1


def test_where_reports_line():
    cfg = Config.from_string(SAMPLE, source="app.ini")
    assert cfg.where("database", "url") == ("app.ini", 14)


def test_section_proxy():
    cfg = Config.from_string(SAMPLE)
    server = cfg["server"]
    assert server["host"] == "0.0.0.0"
    assert "timeout" in server
    server["host"] = "127.0.0.1"
    assert cfg.get("server", "host") == "127.0.0.1"


def test_later_sources_override():
    cfg = Config.from_string("[a]\nx = 1\ny = 2\n")
    cfg.read_string("[a]\nx = 10\n", source="override.ini")
    assert (cfg.get("a", "x"), cfg.get("a", "y")) == ("10", "2")
    assert cfg.sources == ["<string>", "override.ini"]
