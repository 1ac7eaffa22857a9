from iniconf import Config


def test_dump_round_trip():
    text = "[a]\nx = 1\nmotd = '  hi  '\nlines = one\n    two\n"
    cfg = Config.from_string(text)
    again = Config.from_string(cfg.dumps())
    assert again.as_dict() == cfg.as_dict()


def test_dump_quotes_values_with_comment_characters():
    cfg = Config()
    cfg.add_section("a")
    cfg.set("a", "x", "a # b")
    assert cfg.dumps() == '[a]\nx = "a # b"\n'


def test_read_dict():
    cfg = Config().read_dict({"s": {"Port": 80, "empty": None}})
    assert cfg.get("s", "port") == "80"
    assert cfg.get("s", "empty") == ""
