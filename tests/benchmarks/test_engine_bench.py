"""`nexus-agent bench decode --quick`: every policy, context, batch and engine measured side by side, with the bound."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from cli.app import app


def test_quick_decode_bench_prints_its_tables_and_rows(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    out = tmp_path / "d.json"
    try:
        result = CliRunner().invoke(app, ["bench", "decode", "--quick", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    assert "Decode: tokens/s" in result.output
    assert "Ratios of tokens/s" in result.output
    assert "load average" in result.output
    data = json.loads(out.read_text())
    rows = data["rows"]
    keys = {(r["policy"], r["context"], r["batch"], r["engine"]) for r in rows}
    assert keys == {
        (p, c, b, e)
        for p in ("full", "nexus-agent", "h2o")
        for c in (256, 512)
        for b in (1, 2)
        for e in ("eager", "static")
    }
    assert data["bandwidth_gb_s"] > 0
    assert data["weights_mib"] > 0
    for r in rows:
        assert r["tok_s"] > 0
        assert r["ms_step"] > 0
        assert r["bound_ms"] > 0
        assert r["of_bound"] > 0
        if r["engine"] == "eager":
            assert r["x_eager"] == 1.0
            assert r["agree"] == 1.0
        assert len(r["greedy"]) == 40
        assert 0 <= r["agree"] <= 1  # --quick decodes 40 tokens
        if r["policy"] == "full":  # the full cache holds the prompt and the decoded tokens of every row
            assert r["kv_mib"] * 2**20 >= r["batch"] * r["context"] * 4 * 2 * 2 * 32 * 4
    evicting = [r for r in rows if r["policy"] != "full"]
    full = {(r["context"], r["batch"], r["engine"]): r["kv_mib"] for r in rows if r["policy"] == "full"}
    assert all(r["kv_mib"] < full[(r["context"], r["batch"], r["engine"])] / 2 for r in evicting)  # 25% + slack


def test_unknown_engine_is_a_user_error() -> None:
    from kvstore.errors import KVStoreError

    result = CliRunner().invoke(app, ["bench", "decode", "--quick", "--engines", "eager,jit"])
    assert isinstance(result.exception, KVStoreError)  # cli/errors.py prints it as one line
    assert "unknown engine(s) jit" in str(result.exception)
