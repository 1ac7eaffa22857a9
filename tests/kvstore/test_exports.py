"""`import kvstore` is lazy; its exports must resolve to what they name however the submodules were imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kvstore

PACKAGE = Path(kvstore.__file__).parent


def test_no_export_shares_its_name_with_a_submodule() -> None:
    """Importing a submodule binds its name on the package, which would hide an export of the same name."""
    submodules = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    assert set(kvstore.__all__) & submodules == set()


def test_exports_resolve_after_every_submodule_was_imported() -> None:
    code = (
        "import importlib, pkgutil, kvstore\n"
        "for m in pkgutil.iter_modules(kvstore.__path__):\n"
        "    importlib.import_module('kvstore.' + m.name)\n"
        "bad = [n for n in kvstore.__all__ if type(getattr(kvstore, n)).__name__ == 'module']\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_kvstore_does_not_import_torch() -> None:
    code = "import sys, kvstore, kvstore.errors, kvstore.defaults; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
