"""Memory profiles: what an agent's replies need of the fixed text of its opening.

An agent opens every session with the same text around the task: its system prompt (tools, call format, rules)
before the task statement and its standing instructions after it. A profile holds, per layer and kv head, the
attention the agent's replies gave each token of that fixed prefix and suffix, measured on the full cache over
recorded conversations (`nexus-agent calibrate`, kvstore.profiles.calibrate). A session whose opening starts with the
profile's prefix tokens and ends with its suffix tokens hands those weights to its cache (EvictingCache.set_prior);
the default memory then ranks those tokens by what replies needed instead of by what the opening's own queries
attended (docs/memory.md, "Memory profiles")."""

from __future__ import annotations

import hashlib
import io
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from kvstore.defaults import PROFILE_SUFFIX
from kvstore.errors import KVStoreError, SettingError

PROFILE_VERSION = 1


@dataclass
class MemoryProfile:
    """Weights are > 0, float32, scaled to mean 1 per (layer, kv head) over the prefix and suffix tokens."""

    prefix: list[int]  # token ids every calibration opening starts with
    suffix: list[int]  # token ids every calibration opening ends with
    prefix_weight: torch.Tensor  # [L, Hkv, len(prefix)]
    suffix_weight: torch.Tensor  # [L, Hkv, len(suffix)]
    identity: dict[str, Any]  # the model's architecture (kvstore.cache.evicting.model_identity keys)
    conversations: int  # how many conversations the weights average
    meta: dict[str, Any] = field(default_factory=dict)  # model name, max tokens, sources: for people

    def __post_init__(self) -> None:
        layers, heads = self.identity.get("num_layers"), self.identity.get("num_kv_heads")
        for name, ids, w in (("prefix", self.prefix, self.prefix_weight), ("suffix", self.suffix, self.suffix_weight)):
            if tuple(w.shape) != (layers, heads, len(ids)):
                raise KVStoreError(f"memory profile: {name} weights {tuple(w.shape)} != {(layers, heads, len(ids))}")
            if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
                raise KVStoreError(f"memory profile: {name} weights must be finite and >= 0")
        if not self.prefix and not self.suffix:
            raise KVStoreError("memory profile: no fixed opening text (empty prefix and suffix)")

    @property
    def template_tokens(self) -> int:
        return len(self.prefix) + len(self.suffix)

    @property
    def summary(self) -> str:
        """What it holds, for people: "P prefix + S suffix template tokens from N conversations"."""
        template = f"{len(self.prefix)} prefix + {len(self.suffix)} suffix template tokens"
        return f"{template} from {self.conversations} conversation{'' if self.conversations == 1 else 's'}"

    def check_model(self, identity: dict[str, Any]) -> None:
        """Raise when the profile was calibrated on a model of another architecture."""
        key = self._mismatch(identity)
        if key is not None:
            raise KVStoreError(
                f"memory profile was calibrated on a model with {key}={self.identity.get(key)!r}; this model has "
                f"{key}={identity.get(key)!r} (calibrate one for this model: nexus-agent calibrate)"
            )

    def fits(self, identity: dict[str, Any]) -> bool:
        return self._mismatch(identity) is None

    def _mismatch(self, identity: dict[str, Any]) -> str | None:
        """The first architecture key on which the profile's model and this one differ, or None."""
        from kvstore.cache.evicting import ARCHITECTURE_KEYS  # here: a listing of profiles needs no transformers

        return next((k for k in ARCHITECTURE_KEYS if self.identity.get(k) != identity.get(k)), None)

    @classmethod
    def load_for(cls, path: str | Path, identity: dict[str, Any]) -> MemoryProfile:
        """`load`, then `check_model` against the model's identity (kvstore.cache.evicting.model_identity). The file
        is read
        once while it stays the same (a server opens many sessions with one profile); a changed file is read again."""
        profile = _load_cached(Path(path))
        profile.check_model(identity)
        return profile

    def prior_for(self, opening: Sequence[int]) -> tuple[torch.Tensor, int] | None:
        """Weights by position [L, Hkv, len(opening)] for an opening that starts with the profile's prefix and ends
        with its suffix, with how many template tokens matched; 0 on the tokens between them (the task's own text).

        The prefix and suffix match as far as they agree with the opening: calibration conversations may share a
        few task tokens by chance (two tasks that start with the same word), which a new task need not have. The
        suffix may also differ in a few tokens near its end (SUFFIX_SLACK), such as the step limit an agent states
        after its instructions ("Steps Remaining: 40" where the profile's runs had 5): its text before them matches
        still. None when less than half of the template tokens match: the opening is another agent's; for an `exact`
        profile, when its prefix does not match in full or more than SUFFIX_SLACK suffix tokens do not."""
        n = len(opening)
        a = _agree(self.prefix, opening[: len(self.prefix)])
        out = torch.zeros(*self.prefix_weight.shape[:2], n)
        out[..., :a] = self.prefix_weight[..., :a]
        matched = a
        for s0, o0, size in _suffix_runs(self.suffix, opening[a:]):  # ends, counted back from the last token
            o_end, s_end = n - o0, len(self.suffix) - s0
            out[..., o_end - size : o_end] = self.suffix_weight[..., s_end - size : s_end]
            matched += size
        whole = a == len(self.prefix) and matched + SUFFIX_SLACK >= self.template_tokens
        if 2 * matched < self.template_tokens or (self.exact and not whole):
            return None
        return out, matched

    @property
    def exact(self) -> bool:
        """Applies only to an opening that carries its whole template, but for up to SUFFIX_SLACK tokens near its end
        (the step limit an agent states last): a shipped profile of the built-in agent (pipeline.profiles.builtin),
        which another harness that shares its system prompt only does not get."""
        return bool(self.meta.get("exact"))

    def digest(self) -> str:
        """A digest of what a session takes from this profile: its template tokens and their weights."""
        h = hashlib.sha256(repr((self.prefix, self.suffix)).encode())
        for weights in (self.prefix_weight, self.suffix_weight):
            h.update(weights.float().contiguous().numpy().tobytes())
        return h.hexdigest()

    # --- files ----------------------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        self.save_to(tmp)
        tmp.replace(path)

    def save_to(self, f) -> None:
        """Write the profile file's content to `f` (a path or a binary file object)."""
        data = {
            "version": PROFILE_VERSION,
            "prefix": torch.tensor(self.prefix, dtype=torch.int64),
            "suffix": torch.tensor(self.suffix, dtype=torch.int64),
            "prefix_weight": self.prefix_weight.float().contiguous(),
            "suffix_weight": self.suffix_weight.float().contiguous(),
            "identity": dict(self.identity),
            "conversations": self.conversations,
            "meta": dict(self.meta),
        }
        torch.save(data, f)

    @classmethod
    def load(cls, path: str | Path) -> MemoryProfile:
        """Read a profile file (tensors and plain data only: nothing in it is executed)."""
        path = Path(path)
        if not path.is_file():
            raise KVStoreError(f"memory profile {path} does not exist (make one with: nexus-agent calibrate)")
        return cls._read(path, f"memory profile {path}")

    @classmethod
    def load_bytes(cls, data: bytes) -> MemoryProfile:
        """A profile from the content of a profile file (sent over the network: checked like a file)."""
        return cls._read(io.BytesIO(data), "the memory profile sent")

    @classmethod
    def _read(cls, source, what: str) -> MemoryProfile:
        try:
            data = torch.load(source, map_location="cpu", weights_only=True)
            if data.get("version") != PROFILE_VERSION:
                raise KVStoreError(f"{what}: version {data.get('version')!r} is not supported")
            return cls(
                prefix=data["prefix"].tolist(),
                suffix=data["suffix"].tolist(),
                prefix_weight=data["prefix_weight"].float(),
                suffix_weight=data["suffix_weight"].float(),
                identity=dict(data["identity"]),
                conversations=int(data["conversations"]),
                meta=dict(data.get("meta", {})),
            )
        except KVStoreError:
            raise
        except Exception as e:  # a truncated, foreign or corrupt file (torch's own text would advise unsafe loading)
            raise KVStoreError(
                f"{what} cannot be read: not a memory profile, or a damaged one ({type(e).__name__})"
            ) from None


def load_profiles(
    path: str | Path, identity: dict[str, Any], skip_unreadable: bool = False
) -> list[tuple[str, MemoryProfile]]:
    """The profiles a session may use, as (file name, profile): one file (checked against the model: a profile of
    another model raises), or every `*.pt` file of a directory, such as the profile store that `nexus-agent
    calibrate` writes to by default; a directory's profiles of other models are skipped (a store may serve several
    models). A missing or corrupt file raises; with `skip_unreadable`, a directory's corrupt file is skipped instead,
    said once per version of the file on stderr."""
    path = Path(path)
    if not path.is_dir():
        return [(path.name, MemoryProfile.load_for(path, identity))]
    return [(name, profile) for name, profile in _read_all(path, skip_unreadable) if profile.fits(identity)]


def check_readable(path: str | Path) -> int:
    """Read every profile at `path` (a file, or a directory's `*.pt` files) so that a missing or corrupt one stops a
    run before its first task rather than in each; how many were read. Reads are remembered (load_profiles)."""
    return len(_read_all(Path(path)))


def _read_all(path: Path, skip_unreadable: bool = False) -> list[tuple[str, MemoryProfile]]:
    """(file name, profile) of one file, or of every profile file of a directory, read once per file version; with
    `skip_unreadable`, a directory's file that cannot be read is left out (`_skipped`)."""
    if not path.is_dir():
        return [(path.name, _load_cached(path))]
    found = []
    for f in sorted(path.glob(f"*{PROFILE_SUFFIX}")):
        try:
            found.append((f.name, _load_cached(f, path)))
        except KVStoreError as e:
            if not skip_unreadable:
                raise
            _skipped(str(f), _version(f), str(e).split(";")[0])
    return found


def _version(path: Path) -> tuple[int, int] | None:
    """(modification time, size) of a file: what tells its versions apart (None: it cannot be read)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=64)
def _skipped(path: str, version: tuple[int, int] | None, why: str) -> None:
    """Say on stderr, once per version of the file, that an unreadable profile was skipped."""
    print(f"nexus-agent: memory profile skipped: {why}", file=sys.stderr, flush=True)


def best_match(
    profiles: Sequence[tuple[str, MemoryProfile]], opening: Sequence[int]
) -> tuple[torch.Tensor | None, str]:
    """`prior_for` of the profile whose template covers most of this opening, with what happened, for people:
    (weights or None, "matched N of M template tokens (file)" or why none applies)."""
    best = best_fit(profiles, opening)
    if best is None:
        if not profiles:
            return None, "no memory profile for this model"
        what = "the profile's template" if len(profiles) == 1 else f"the template of any of {len(profiles)} profiles"
        return None, f"opening does not carry {what}"
    name, profile, weights, matched = best
    return weights, f"matched {matched} of {profile.template_tokens} template tokens ({name})"


def best_fit(
    profiles: Sequence[tuple[str, MemoryProfile]], opening: Sequence[int]
) -> tuple[str, MemoryProfile, torch.Tensor, int] | None:
    """(file name, profile, `prior_for` weights, template tokens matched) of the profile whose template covers most
    of this opening (the first of equals), or None when no profile's template is carried."""
    best = None
    for name, profile in profiles:
        found = profile.prior_for(opening)
        if found is not None and (best is None or found[1] > best[3]):
            best = (name, profile, found[0], found[1])
    return best


def fingerprint(path: str | Path, architecture: dict[str, Any] | None = None) -> tuple[dict[str, str], set[str]]:
    """({file name: digest of its content}, {file names of other models' profiles}) of the profiles at `path` (a
    file, or a directory's profile files), split by whether they fit `architecture` (None: not known, every one
    counts): a run records the digests so that resuming it after a calibration changed its model's profiles is
    noticed, while other models' profiles, which its sessions skip, may come and go (pipeline.eval_files)."""
    digests, others = {}, set()
    for name, profile in _read_all(Path(path)):
        if architecture is None or profile.fits(architecture):
            digests[name] = profile.digest()[:16]
        else:
            others.add(name)
    return digests, others


MODEL_NAME_CHARS = 100  # of the model's name in a store's file name


def store_name(profile: MemoryProfile) -> str:
    """A file name for a profile in a store: the model's name and a digest of the template tokens, so that two
    calibrations of one agent and model replace each other and other agents or models sit beside them."""
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", str(profile.meta.get("model", "model"))).strip("-.") or "model"
    model = model[:MODEL_NAME_CHARS].rstrip("-.")  # a file name has 255 bytes at most; the digest keeps names apart
    digest = hashlib.sha256(repr((profile.prefix, profile.suffix, sorted(profile.identity.items()))).encode())
    return f"{model}-{digest.hexdigest()[:12]}{PROFILE_SUFFIX}"


def _load_cached(path: Path, folder: Path | None = None) -> MemoryProfile:
    version = _version(path)
    if version is None:
        return MemoryProfile.load(path)  # says that it does not exist
    try:
        return _read_once(str(path.resolve()), *version)
    except KVStoreError as e:
        if folder is None:
            raise
        raise SettingError("profile", f"{folder}: {e}; remove it from there, or use no profile ('none')") from None


@lru_cache(maxsize=32)
def _read_once(path: str, mtime_ns: int, size: int) -> MemoryProfile:
    """MemoryProfile.load, remembered per file version (path, modification time, size); callers never change it."""
    return MemoryProfile.load(path)


SUFFIX_SLACK = 4  # tokens near the end of an opening in which it may differ from a profile's suffix


def _suffix_runs(suffix: Sequence[int], tail: Sequence[int]) -> list[tuple[int, int, int]]:
    """Where `suffix` agrees with the end of `tail` (an opening after its matched prefix): (tokens skipped back
    from the suffix's end, tokens skipped back from the tail's end, tokens that agree), for the run of agreeing
    tokens at the very end, and for one more run before it after a differing stretch of at most SUFFIX_SLACK tokens
    on either side (kept when it is longer than that stretch)."""
    s, t = suffix[::-1], tail[::-1]
    first = _agree(s, t)
    runs = [(0, 0, first)] if first else []
    if first == len(s) or first == len(t):
        return runs
    best = (0, 0, 0)
    for di in range(SUFFIX_SLACK + 1):
        for dj in range(SUFFIX_SLACK + 1):
            i, j = first + di, first + dj
            if (di or dj) and i < len(s) and j < len(t):
                size = _agree(s[i:], t[j:])
                if size > best[2]:
                    best = (i, j, size)
    if best[2] > SUFFIX_SLACK:
        runs.append(best)
    return runs


def _agree(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def common_template(openings: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(prefix length, suffix length): the longest token prefix and suffix every opening shares, never overlapping
    in the shortest one."""
    first = openings[0]
    a = min(_agree(first, o) for o in openings)
    b = min(_agree(first[::-1], o[::-1]) for o in openings)
    return a, min(b, min(len(o) for o in openings) - a)
