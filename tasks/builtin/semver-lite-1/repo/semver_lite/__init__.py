"""semver-lite: Semantic Versioning 2.0.0 parsing, ordering and ranges."""

from semver_lite.ranges import Range, max_satisfying, satisfies
from semver_lite.version import InvalidVersion, Version

__all__ = ["InvalidVersion", "Range", "Version", "max_satisfying", "satisfies"]
__version__ = "1.1.0"
