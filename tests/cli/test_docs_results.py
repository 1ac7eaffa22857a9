"""docs/bench/ holds only the current result of each benchmark (CONTRIBUTING.md, "Results and experiments"): at most
MAX_FILES files, each cited by a page of docs/; dated, superseded and per-experiment results go to research/results/.
Every `docs/bench/...` or `research/results/...` path that README.md, docs/*.md or research/*.md names exists, but
for the superseded files listed in GONE."""

from __future__ import annotations

import re
from pathlib import Path

from clilib import ROOT

BENCH = ROOT / "docs" / "bench"
# 34 files on 2026-12-06 (issue 63: 61 before the archives moved to research/results/), plus one run's .json and
# .txt, say the pending GPU decode. A new result beyond that replaces a file of its benchmark (git keeps the old
# one) or goes to research/results/ with the notebook that cites it; it does not raise this number.
MAX_FILES = 36
USER_DOCS = sorted((ROOT / "docs").glob("*.md"))
ALL_DOCS = [ROOT / "README.md", *USER_DOCS, *sorted((ROOT / "research").glob("*.md"))]
# Files the notebooks name as they were written, deleted as superseded when research/ was made (research/README.md,
# "Results"); git history keeps them. A name without extension stands for all its files (`stem.*`, the bare stem of
# a merge's OUT_PREFIX). Each must stay gone: a path here that exists again is an error too.
GONE = {
    "docs/bench/overhead",
    "docs/bench/overhead-v3",
    "docs/bench/quality-v4-default",
    "docs/bench/replay.md",  # the notebook that is research/replay-notebook.md
    "docs/bench/serve.md",  # the notebook that is research/serve-notebook.md
    "docs/bench/replay-8k-baselines",
    "docs/bench/replay-qwen05b-oracle",
    "docs/bench/replay-qwen05b-v4",
    "docs/bench/replay-qwen05b-v5",
    "docs/bench/replay-qwen05b-v7",
    *(f"docs/bench/replay-v{n}" for n in range(3, 9)),
}
# a result path as the docs write it: a file, `stem.*`, `stem.{json,txt}`, `stem-*`, or a replay_merge OUT_PREFIX
_PATH = re.compile(r"(?:docs/bench|research/results)/[\w.*{},-]*[\w*}]")
# a docs/bench file as docs/*.md cite it: by path, relative (`bench/x.json`) or by name alone (`x.*`, `x.{json,txt}`)
_CITED = re.compile(r"(?<![\w./-])(?:docs/)?(?:bench/)?([\w-]+)\.(\*|\{[\w,]+\}|json|txt|png)(?![\w-])")


def _expand(path: str) -> list[str]:
    """`a.{json,txt}` -> [a.json, a.txt] (every brace group, left to right)."""
    group = re.search(r"\{([^{}]*)\}", path)
    if not group:
        return [path]
    return [q for alt in group.group(1).split(",") for q in _expand(path[: group.start()] + alt + path[group.end() :])]


def _cited_paths() -> list[tuple[str, str]]:
    return [(doc.name, p) for doc in ALL_DOCS for m in _PATH.finditer(doc.read_text("utf-8")) for p in _expand(m[0])]


def test_docs_bench_stays_small() -> None:
    files = sorted(p.name for p in BENCH.iterdir())
    assert all((BENCH / f).is_file() for f in files), "docs/bench/ holds files only"
    assert len(files) <= MAX_FILES, (
        f"docs/bench/ has {len(files)} files, at most {MAX_FILES}: a new measurement replaces its benchmark's file, "
        "and dated, superseded or per-experiment results go to research/results/ (CONTRIBUTING.md)"
    )


def test_every_docs_bench_file_is_cited_by_the_docs() -> None:
    cited: set[tuple[str, str]] = set()  # (stem, extension or "*")
    for doc in USER_DOCS:
        for stem, ext in _CITED.findall(doc.read_text("utf-8")):
            cited.update((stem, e) for e in ext.strip("{}").split(","))
    uncited = [f.name for f in sorted(BENCH.iterdir()) if not {(f.stem, f.suffix[1:]), (f.stem, "*")} & cited]
    assert uncited == [], f"no page of docs/ cites these; they belong in research/results/: {uncited}"


def test_every_cited_result_path_exists() -> None:
    missing = []
    for doc, path in _cited_paths():
        stem = re.sub(r"\.(\*|[a-z]+)$", "", path)
        if {path, stem, stem.rstrip("-*")} & GONE:
            continue
        # a file, a glob, or a merge's OUT_PREFIX (the files are OUT_PREFIX.json, .txt, .png)
        if not (any(ROOT.glob(path)) or any(ROOT.glob(path + ".*"))):
            missing.append(f"{doc}: {path}")
    assert missing == [], "cited results that do not exist (moved? update the link):\n" + "\n".join(missing)


def test_superseded_files_stay_gone() -> None:
    back = [p for p in sorted(GONE) if (ROOT / p).exists() or ("." not in Path(p).name and any(ROOT.glob(p + ".*")))]
    assert back == [], f"GONE lists files that exist again; take them off the list: {back}"


def test_the_patterns_read_what_the_docs_write() -> None:
    assert _expand("research/results/x-{a,b}-{json,txt}") == [
        "research/results/x-a-json",
        "research/results/x-a-txt",
        "research/results/x-b-json",
        "research/results/x-b-txt",
    ]
    text = "`replay-8k.*`, [json](bench/serve.json), docs/bench/quality-v3.{json,txt}, research/results/decode.json"
    assert _CITED.findall(text) == [("replay-8k", "*"), ("serve", "json"), ("quality-v3", "{json,txt}")]
    assert [m[0] for m in _PATH.finditer("(`docs/bench/replay-heldout-*`, research/results/a.{json,txt}).")] == [
        "docs/bench/replay-heldout-*",
        "research/results/a.{json,txt}",
    ]
