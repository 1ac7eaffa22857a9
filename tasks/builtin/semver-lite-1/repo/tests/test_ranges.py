from semver_lite import max_satisfying, satisfies


def test_caret():
    assert satisfies("1.4.2", "^1.2")
    assert not satisfies("2.0.0", "^1.2")
    assert satisfies("0.2.5", "^0.2.3")
    assert not satisfies("0.3.0", "^0.2.3")


def test_tilde():
    assert satisfies("1.2.9", "~1.2.3")
    assert not satisfies("1.3.0", "~1.2.3")


def test_and_or():
    assert satisfies("1.5.0", ">=1.2,<2")
    assert satisfies("3.1.0", ">=1.2,<2 || >=3")
    assert not satisfies("2.5.0", ">=1.2,<2 || >=3")


def test_prerelease_excluded_unless_named():
    assert not satisfies("2.0.0-beta.1", ">=1.0.0")
    assert satisfies("2.0.0-beta.2", ">=2.0.0-beta.1")


def test_max_satisfying():
    assert max_satisfying(["1.2.0", "1.3.1", "2.0.0"], ">=1.2,<2") == "1.3.1"
    assert max_satisfying(["0.9.0"], ">=1") is None
