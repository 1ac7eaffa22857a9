import pytest

from semver_lite import InvalidVersion, Version


def test_parse_full():
    v = Version.parse("1.2.3-rc.1+build.5")
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.prerelease == ("rc", "1")
    assert v.build == ("build", "5")


def test_parse_accepts_v_prefix():
    assert str(Version.parse("v2.0.1")) == "2.0.1"


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-01", "1.2.3-", "banana"])
def test_parse_rejects(text):
    with pytest.raises(InvalidVersion):
        Version.parse(text)


def test_release_ordering():
    assert Version.parse("1.2.3") < Version.parse("1.2.10") < Version.parse("1.10.0") < Version.parse("2.0.0")


def test_numeric_prerelease_identifiers_compare_numerically():
    assert Version.parse("1.0.0-alpha.2") < Version.parse("1.0.0-alpha.10")


def test_alphanumeric_identifiers_sort_after_numeric():
    assert Version.parse("1.0.0-alpha.1") < Version.parse("1.0.0-alpha.beta")


def test_build_metadata_is_ignored_for_equality():
    assert Version.parse("1.0.0+a") == Version.parse("1.0.0+b")


def test_bumps():
    v = Version.parse("1.2.3")
    assert str(v.bump_major()) == "2.0.0"
    assert str(v.bump_minor()) == "1.3.0"
    assert str(v.bump_patch()) == "1.2.4"
    assert str(Version.parse("1.2.4-rc.1").bump_patch()) == "1.2.4"
