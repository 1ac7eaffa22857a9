"""The Version type: parsing, precedence (semver.org section 11) and bumping."""

import functools
import re

_VERSION_RE = re.compile(
    r"""^v?
    (?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)
    (?:-(?P<prerelease>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
    (?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
    $""",
    re.VERBOSE,
)


class InvalidVersion(ValueError):
    pass


def _identifier_key(ident):
    """Numeric identifiers sort numerically and before alphanumeric ones."""
    if ident.isdigit():
        return (0, int(ident), "")
    return (1, 0, ident)


@functools.total_ordering
class Version:
    __slots__ = ("major", "minor", "patch", "prerelease", "build")

    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        if min(major, minor, patch) < 0:
            raise InvalidVersion("version numbers must be non-negative")
        self.major, self.minor, self.patch = int(major), int(minor), int(patch)
        self.prerelease = tuple(str(p) for p in prerelease)
        self.build = tuple(str(b) for b in build)

    @classmethod
    def parse(cls, text):
        if isinstance(text, Version):
            return text
        match = _VERSION_RE.match(text.strip())
        if not match:
            raise InvalidVersion(f"not a semantic version: {text!r}")
        pre, build = match.group("prerelease"), match.group("build")
        for ident in (pre or "").split("."):
            if len(ident) > 1 and ident.isdigit() and ident.startswith("0"):
                raise InvalidVersion(f"numeric identifier with a leading zero in {text!r}")
        return cls(
            int(match.group("major")),
            int(match.group("minor")),
            int(match.group("patch")),
            pre.split(".") if pre else (),
            build.split(".") if build else (),
        )

    @property
    def is_prerelease(self):
        return bool(self.prerelease)

    def _key(self):
        # A pre-release has lower precedence than the release it precedes:
        # 1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-beta < 1.0.0-rc.1 < 1.0.0
        pre = tuple(_identifier_key(p) for p in self.prerelease)
        release_rank = 0 if self.prerelease else 0
        return (self.major, self.minor, self.patch, release_rank, pre)

    def __eq__(self, other):
        if isinstance(other, str):
            other = Version.parse(other)
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other):
        if isinstance(other, str):
            other = Version.parse(other)
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self):
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self):
        return f"Version({str(self)!r})"

    def bump_major(self):
        return Version(self.major + 1, 0, 0)

    def bump_minor(self):
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self):
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)

    def release(self):
        """The release this version belongs to (pre-release and build dropped)."""
        return Version(self.major, self.minor, self.patch)
