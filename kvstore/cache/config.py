"""The configuration of an evicting cache: what every policy shares (`CacheConfig`) plus the policy's own settings
(a dataclass in the policy's file) and its class, resolved once from its registered name; and the one routing of flat
options (`make_cache(**options)`, a session's memory settings, `POLICY@key=value` specs, a saved session's options)
to the one or the other.

The policies read a CacheConfig through `kvstore.policies.settings.SharedSettings` (a Protocol), so this module may
name them (the registry) without the policies importing it back."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from kvstore.defaults import DEFAULT_POLICY, check_budget
from kvstore.errors import KVStoreError, SettingError
from kvstore.policies import POLICIES, Policy, build_policy, policy_class, policy_defaults
from kvstore.policies.settings import settings_options

# options earlier versions had, with the value that meant "off": a saved session that set one cannot continue
_REMOVED = {"renorm_candidates": False, "pyramid_spread": None}
# options that change how, not what, the cache computes: a session saved before one existed takes its default
_NEUTRAL = {"engine": "static"}
# options added later, with the value that means what a session saved before them did (token_blend: a session
# saved before token priors has none, so it computes the same with any value; it takes the default; task_head: a
# session saved before it kept no task head; last_weight: nor a bonus for the latest reply; name_weight: nor one for
# the task's code names; prefill_slack: every prefill chunk was brought back to the budget; opening_recent_share:
# the opening kept the recent share of the rest; task_text_weight: no bonus for the task's text)
_ADDED = {
    "density_grows": False,
    "token_blend": 0.5,
    "task_head": 0,
    "last_weight": 0.0,
    "name_weight": 0.0,
    "prefill_slack": 0,
    "opening_recent_share": None,
    "task_text_weight": 0.0,
}


@dataclass
class CacheConfig:
    """What every policy shares: the budget and the forced set the cache keeps (sink, recent tokens or blocks),
    when it evicts and batches statistics, its kernels and seed. A policy's own knobs live in `settings`."""

    policy: str = DEFAULT_POLICY  # registered policy name (kvstore.policies.POLICIES)
    budget: int | float | None = (
        None  # int: tokens per layer; float in (0, 1]: density of the prompt; None: never evict
    )
    density_grows: bool = False  # a density budget follows the conversation (density x tokens seen, at each prefill)
    # instead of being fixed by the first prompt (serve's sessions)
    block: int = 32  # b: tokens per key block (eviction granularity of block policies, and the decode slack)
    sink: int | None = None  # attention-sink tokens always kept; None: the policy's default (docs/baselines.md)
    recent: int | float | None = None  # token policies: recent tokens always kept (float: share of the layer budget)
    recent_blocks: int = 1  # block policies: most recent complete blocks always kept (plus the incomplete tail)
    recent_share: float = 0.0  # keep at least this share of the layer budget as recent tokens (whole blocks for blocks)
    decode_slack: int | None = None  # tokens a layer may grow past its budget in decode; None: one block; 0: every step
    observe_batch: int = 64  # decoded tokens whose attention statistics wait for one call (1: every token alone)
    compress_once: bool = False  # prefill-only policies: compress at the end of the first prefill only (benchmarks)
    score_chunk: int = 1 << 24  # attention statistics: at most this many fp32 probabilities live at once
    chunk_size: int = 512  # prefill chunk (tokens) for kvstore.prefill()
    prefill_slack: int = 0  # tokens a layer may hold past its budget between the chunks of one prefill: a message
    # shorter than this is evicted once, after its last chunk, on the attention of all its queries (0: every chunk)
    use_triton: bool | None = None  # fused Triton kernels: None = on CUDA when installed; False = torch paths
    engine: str = "static"  # KV storage: "static" buffers written in place, "eager" concatenating (cache/buffers.py)
    seed: int = 0  # seed of the cache's torch.Generator (reservoir draws)
    settings: Any = None  # the policy's own settings (its dataclass, e.g. NexusSettings); None: its defaults
    policy_type: type[Policy] = field(init=False, repr=False, compare=False)  # the class `policy` names, looked up
    # once here (the cache builds its policy from it; `dataclasses.replace` with another policy looks it up again)

    def __post_init__(self) -> None:
        self.policy_type = policy_class(self.policy)
        self.validate()
        if self.settings is None:
            self.settings = self.policy_type.settings_from({})

    def validate(self) -> None:
        """Each field checked once, each refusal a SettingError that names the field (a front end names its flag)."""
        self.budget = check_budget(self.budget)
        if self.engine not in ("static", "eager"):
            raise SettingError("engine", f"must be 'static' or 'eager', got {self.engine!r}")
        for name in ("block", "chunk_size", "score_chunk", "observe_batch"):
            if getattr(self, name) < 1:
                raise SettingError(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("sink", "decode_slack", "prefill_slack", "recent", "recent_blocks"):
            if (getattr(self, name) or 0) < 0:
                raise SettingError(name, f"must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.recent_share < 1.0:
            raise SettingError("recent_share", f"must be in [0, 1), got {self.recent_share}")
        if isinstance(self.recent, float) and self.recent >= 1.0:
            raise SettingError("recent", f"as a share of the budget must be < 1, got {self.recent}")

    @classmethod
    def of(cls, policy: str = DEFAULT_POLICY, **options: Any) -> CacheConfig:
        """The config a new cache runs with (`make_cache`, a session's `SessionConfig.cache`): flat options over the
        option defaults the policy's registered name implies (`nexus-agent`'s top-K selector, ...)."""
        return cls.from_options(policy, **(policy_defaults(policy) | options))

    @classmethod
    def from_options(cls, policy: str = DEFAULT_POLICY, **options: Any) -> CacheConfig:
        """The config of `policy` from flat options: the shared ones set fields here, every other goes to the
        option of that name in the policy's settings; an option neither declares is an error."""
        options = dict(options)
        config = cls(policy=policy, **{name: options.pop(name) for name in SHARED if name in options})
        config.settings = config.policy_type.settings_from(options)
        if options:
            raise KVStoreError(
                f"unknown cache option(s) {', '.join(sorted(options))} for policy {policy!r}; its options: "
                f"{', '.join(sorted(own_options(policy)))}; every policy's: {', '.join(SHARED)}"
            )
        return config

    @classmethod
    def from_saved(cls, data: dict[str, Any]) -> CacheConfig:
        """The config `to_dict` wrote into a saved session (kvstore.cache.snapshot). Options of other policies (a
        session
        saved when every option was a field here holds them all) are not this policy's and are left out; one of
        this policy's missing, or a removed option set, means an older version saved it: refused in one line."""
        policy = data.get("policy", DEFAULT_POLICY)
        data = _NEUTRAL | _ADDED | data  # options that do not change results: a session saved before them continues
        wanted = [*SHARED, *own_options(policy)]
        if any(name not in data for name in wanted) or any(data.get(k, v) != v for k, v in _REMOVED.items()):
            raise saved_by_older_version(f"policy {policy!r} with other options")
        return cls.from_options(policy, **{name: data[name] for name in wanted})

    def to_dict(self) -> dict[str, Any]:
        """Flat options (the names `from_options` takes), this policy's settings included."""
        shared = {name: getattr(self, name) for name in ("policy", *SHARED)}
        return shared | settings_options(self.settings)

    def results(self) -> dict[str, Any]:
        """The options that decide what the cache computes: `to_dict` less those that change only how (`engine`). A
        run that resumes compares them with the ones it started with (`changed_results`)."""
        return {k: v for k, v in self.to_dict().items() if k not in _NEUTRAL}


def changed_results(held: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`name: then -> now` for each option that decides the results and differs between `held` (a `results()`
    written by this or an earlier version: options added since take the value that means what it did then) and
    `now` (this version's `results()`); one entry saying so when `held` names a policy or an option this version no
    longer has."""
    try:
        then = CacheConfig.from_saved(held).results()
    except KVStoreError:
        return [f"policy {held.get('policy')!r} with options this version no longer has"]
    return [f"{k}: {then.get(k)!r} -> {v!r}" for k, v in now.items() if then.get(k) != v]


def saved_by_older_version(what: str) -> KVStoreError:
    """The one error for a session saved under earlier definitions (`what` differs), which cannot continue exactly."""
    return KVStoreError(
        f"this session was saved by an older version of nexus-agent ({what}) and cannot continue exactly; "
        "start a new session"
    )


SHARED = tuple(f.name for f in fields(CacheConfig) if f.name not in ("policy", "settings", "policy_type"))


def own_options(policy: str) -> dict[str, Any]:
    """The options `policy`'s settings declare, with their defaults (before the registry's variant defaults)."""
    return settings_options(policy_class(policy).settings_from({}))


def declared(policy: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options of `options` that `policy` declares (shared or its own): how one set of ablation options applied
    across policies (bench quality's --cache-option) gives each policy what applies to it."""
    known = {*SHARED, *own_options(policy)}
    return {k: v for k, v in options.items() if k in known}


def option_value(key: str, text: str, policy: str = DEFAULT_POLICY) -> Any:
    """A cache option written as text (`POLICY@key=value` specs) as its value: an int, float, bool or None where it
    reads as one; an option whose default is text (e.g. score_memory="none") stays text."""
    if isinstance(_defaults(policy).get(key), str):
        return text
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_policy_spec(text: str, other: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """`POLICY[@key=value,...]` -> (policy, CacheConfig options), the policy and options checked (a clear error
    when unknown or bad); keys of `other` are not cache options: their text values are written there. The
    benchmarks' way of naming a policy with non-default options."""
    policy, _, rest = text.strip().partition("@")
    if policy not in POLICIES:
        raise KVStoreError(f"unknown policy {policy!r} in spec {text!r}; known: {', '.join(POLICIES)}")
    options = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise KVStoreError(f"spec {text!r}: option {item!r} is not key=value")
        if other is not None and key in other:
            other[key] = value
        else:
            options[key] = option_value(key, value, policy)
    CacheConfig.from_options(policy, **options)
    return policy, options


def _defaults(policy: str) -> dict[str, Any]:
    shared = {name: f.default for name, f in CacheConfig.__dataclass_fields__.items() if name in SHARED}
    return shared | own_options(policy)


def register_policy(name: str, cls: type[Policy], **option_defaults: Any) -> None:
    """Register `cls` under `name` with the option defaults that name implies (flat options, as `make_cache` takes
    them); checked now, so a bad option fails here. Research variants register themselves this way
    (research/policies.py); a name already registered for another entry is refused."""
    if POLICIES.get(name, (cls, option_defaults)) != (cls, option_defaults):
        raise KVStoreError(f"policy {name!r} is already registered")
    POLICIES[name] = (cls, dict(option_defaults))
    try:
        CacheConfig.from_options(name, **option_defaults)
    except KVStoreError:
        del POLICIES[name]
        raise


def is_stochastic(name: str, **options: Any) -> bool:
    """Whether this policy (with these options) selects by random draws, so a result depends on the seed."""
    return build_policy(CacheConfig.of(name, **options)).stochastic
