"""Version ranges: comparators joined by commas (AND) and '||' (OR), plus ^ and ~ shorthands.

Pre-releases only satisfy a range if one of its comparators names a pre-release
of the same major.minor.patch (the npm rule), so '>=1.0.0' does not match
'2.0.0-beta.1'.
"""

import operator
import re

from semver_lite.version import InvalidVersion, Version

_OPS = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "=": operator.eq,
    "!=": operator.ne,
}
_COMPARATOR_RE = re.compile(r"^(>=|<=|>|<|==|=|!=|\^|~)?\s*(.+)$")


def _partial(text):
    """'1', '1.2' or '1.2.3[-pre]' -> (Version, number of components given)."""
    parts = text.split("-", 1)[0].split("+", 1)[0].split(".")
    if len(parts) == 3:
        return Version.parse(text), 3
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        raise InvalidVersion(f"bad version in range: {text!r}")
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return Version(*nums), len(parts)


def _expand(op, text):
    """One comparator -> a list of (operator, Version) pairs that must all hold."""
    version, given = _partial(text)
    if op == "^":
        if version.major > 0 or given == 1:
            upper = version.bump_major()
        elif version.minor > 0 or given == 2:
            upper = version.bump_minor()
        else:
            upper = Version(0, 0, version.patch + 1)
        return [(operator.ge, version), (operator.lt, upper)]
    if op == "~":
        upper = version.bump_major() if given == 1 else version.bump_minor()
        return [(operator.ge, version), (operator.lt, upper)]
    if op in (None, "=", "==") and given < 3:
        upper = version.bump_major() if given == 1 else version.bump_minor()
        return [(operator.ge, version), (operator.lt, upper)]
    return [(_OPS[op or "=="], version)]


class Range:
    def __init__(self, text):
        self.text = text
        self.alternatives = []
        for alternative in text.split("||"):
            checks = []
            for comparator in filter(None, (c.strip() for c in alternative.split(","))):
                match = _COMPARATOR_RE.match(comparator)
                checks.extend(_expand(match.group(1), match.group(2).strip()))
            if not checks:
                raise InvalidVersion(f"empty range alternative in {text!r}")
            self.alternatives.append(checks)

    def __contains__(self, version):
        version = Version.parse(version)
        return any(self._matches(checks, version) for checks in self.alternatives)

    @staticmethod
    def _matches(checks, version):
        if not all(op(version, bound) for op, bound in checks):
            return False
        if not version.is_prerelease:
            return True
        return any(bound.is_prerelease and bound.release() == version.release() for _, bound in checks)

    def __repr__(self):
        return f"Range({self.text!r})"


def satisfies(version, range_text):
    return version in Range(range_text)


def max_satisfying(versions, range_text):
    """The highest of `versions` inside the range, as given (or None)."""
    rng = Range(range_text)
    matching = [v for v in versions if v in rng]
    return max(matching, key=Version.parse) if matching else None
