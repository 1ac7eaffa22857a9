"""kvstore.attention sits below the policies and the cache: they import it, it imports neither of them (no import
circle between the attention maths, the policies and the cache). A cache layer and a reply know their owners through
protocols, so they import neither owner's module, not even for type checking."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kvstore

PACKAGE = Path(kvstore.__file__).parent


def _loaded_after(statement: str) -> set[str]:
    """The kvstore modules a fresh interpreter has loaded after running `statement`."""
    code = f"import sys\n{statement}\nprint(' '.join(m for m in sys.modules if m.startswith('kvstore')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_attention_maths_imports_neither_the_cache_nor_the_policies() -> None:
    modules = "received, scoring, decode, prefill, dispatch"
    loaded = _loaded_after(f"from kvstore.attention import {modules}")
    assert {m for m in loaded if m.startswith(("kvstore.cache", "kvstore.policies"))} == set()


def test_the_policies_do_not_import_the_cache() -> None:
    loaded = _loaded_after("import kvstore.policies")
    assert {m for m in loaded if m.startswith("kvstore.cache")} == set()


def _imported(path: Path) -> set[str]:
    """Every module a source file names in an import statement (those under `if TYPE_CHECKING:` too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_a_cache_layer_does_not_import_its_cache() -> None:
    assert "kvstore.cache.evicting" not in _imported(PACKAGE / "cache" / "layer.py")


def test_a_reply_does_not_import_its_session() -> None:
    assert "kvstore.session.session" not in _imported(PACKAGE / "session" / "reply.py")
