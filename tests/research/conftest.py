"""The tests of research/'s scripts: research/ is not a package, so its scripts are imported by name from there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
