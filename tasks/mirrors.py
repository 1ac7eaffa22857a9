"""Local sources of task repositories: a repo cache dir of git mirrors and git bundles, used before any clone.

A repo cache (`--repo-cache DIR`, or the environment variable NEXUS_REPO_CACHE) holds, per repository
`owner/name`, a mirror dir `owner__name` or `owner__name.git` (bare or not), or a git bundle `owner__name.bundle`
/ `owner__name-<anything>.bundle`. Bundles may be shallow (made from a shallow clone: commits whose parents are
not in the bundle); `git clone` of such a bundle fails, so they are unpacked into a fresh repository instead and
the boundary commits are recorded as shallow.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_CACHE_ENV = "NEXUS_REPO_CACHE"
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}


def repo_cache_dir(given: Path | str | None = None) -> Path | None:
    """The repo cache to use: the one given, else $NEXUS_REPO_CACHE, else none."""
    if given:
        return Path(given).expanduser()
    env = os.environ.get(REPO_CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else None


def find_source(repo: str, cache: Path | None, commit: str = "") -> Path | None:
    """The mirror dir or bundle of `owner/name` in `cache`; a bundle whose heads hold `commit` is preferred."""
    if cache is None or not Path(cache).is_dir():
        return None
    name = repo.replace("/", "__")
    for candidate in (Path(cache) / name, Path(cache) / f"{name}.git"):
        if candidate.is_dir():
            return candidate.resolve()
    bundles = sorted([*Path(cache).glob(f"{name}.bundle"), *Path(cache).glob(f"{name}-*.bundle")])
    holding = [b for b in bundles if commit and any(h.startswith(commit) for h in bundle_heads(b))]
    return (holding or bundles or [None])[0]


def bundle_heads(bundle: Path) -> list[str]:
    """The commit SHAs a bundle's refs point at (read from its text header)."""
    heads = []
    with open(bundle, "rb") as fh:
        for raw in fh:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if not line:
                break  # the header ends with an empty line; the pack follows
            if line[:1] not in ("#", "-", "@") and " " in line:
                heads.append(line.split(" ", 1)[0])
    return heads


def unpack_bundle(bundle: Path, dest: Path) -> None:
    """A repository in `dest` holding the bundle's objects and refs (shallow where the bundle is)."""
    dest.mkdir(parents=True, exist_ok=True)
    _git(dest, "init", "--quiet")
    out = _git(dest, "bundle", "unbundle", str(Path(bundle).resolve()))
    boundary = []
    for line in out.splitlines():
        sha, _, ref = line.partition(" ")
        if ref.startswith("refs/"):
            _git(dest, "update-ref", ref, sha)
            boundary += _shallow_boundary(dest, sha)
    if boundary:
        (dest / ".git" / "shallow").write_text("".join(f"{sha}\n" for sha in sorted(set(boundary))))


def _shallow_boundary(repo: Path, head: str, limit: int = 100_000) -> list[str]:
    """Commits reachable from `head` whose parents are missing (the shallow boundary)."""
    seen, todo, boundary = set(), [head], []
    while todo and len(seen) < limit:
        sha = todo.pop()
        if sha in seen:
            continue
        seen.add(sha)
        parents = [ln.split()[1] for ln in _git(repo, "cat-file", "-p", sha).splitlines() if ln.startswith("parent ")]
        missing = [p for p in parents if not _has_object(repo, p)]
        if missing:
            boundary.append(sha)
        else:
            todo += parents
    return boundary


def _has_object(repo: Path, sha: str) -> bool:
    proc = subprocess.run(["git", "cat-file", "-e", sha], cwd=repo, env={**os.environ, **_GIT_ENV}, capture_output=True)
    return proc.returncode == 0


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **_GIT_ENV}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(f"git {args[0]} failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout
