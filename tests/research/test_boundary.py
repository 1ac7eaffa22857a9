"""research/ stays apart from the product: the package discovery of pyproject.toml leaves it out, and no packaged
module imports it (research may import the product's public API, never the other way round)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
IMPORTS_RESEARCH = re.compile(r"^\s*(from|import)\s+research\b", re.MULTILINE)


def test_research_is_not_packaged() -> None:
    assert not any(fnmatch.fnmatch(name, p) for name in ("research", "research.x") for p in INCLUDE)


def test_the_product_never_imports_research() -> None:
    packages = sorted({p.rstrip("*").rstrip(".") for p in INCLUDE})
    assert packages and all((ROOT / p).is_dir() for p in packages)
    offenders = [
        str(f.relative_to(ROOT))
        for p in packages
        for f in (ROOT / p).rglob("*.py")
        if IMPORTS_RESEARCH.search(f.read_text(encoding="utf-8"))
    ]
    assert offenders == []
