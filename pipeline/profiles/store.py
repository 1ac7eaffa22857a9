"""The profile store, $NEXUS_AGENT_HOME/profiles: where `nexus-agent calibrate` and `--learn-profile` write profiles
and where sessions read them when asked to (--memory-profile auto; the default is builtin, the package's shipped
profile of the built-in agent, pipeline.profiles.builtin); and the one reading of --memory-profile's value (solve,
eval, chat and serve)."""

from __future__ import annotations

from pathlib import Path

from kvstore.defaults import PROFILE_SUFFIX
from pipeline.home import home

AUTO_PROFILE = "auto"  # --memory-profile auto: the profile store, when it holds a profile
NO_PROFILE = "none"  # --memory-profile none: no profile
BUILTIN_PROFILE = "builtin"  # the default: the shipped profile of the run's model, if any (a run never reads the store
# unasked, and nothing is learned or written unless asked)
LOCAL, CLIENT, SERVE = "local", "client", "serve"  # where the model runs: here, in a --server, here for a server
PROFILE_NEEDS_LOCAL_MODEL = (
    "--memory-profile needs the model in this process; a --server runs its own memory settings "
    "(give the profile to nexus-agent serve --memory-profile)"
)


def profile_store() -> Path:
    """Where `nexus-agent calibrate` writes a profile unless told otherwise, and where sessions look for one."""
    return home() / "profiles"


def resolve_profile(value: str | Path | None, mode: str = LOCAL, model: str | None = None) -> Path | None:
    """--memory-profile's value as the file or directory of profiles sessions read
    (kvstore.profiles.profile.load_profiles:
    each session takes the profile whose template its opening carries, if any), checked readable.

    "none" or None: none. "auto": the profile store; for a run (LOCAL) only while it holds a profile; for a CLIENT
    of a --server none (the server applies its own); for a server (SERVE) the store even while empty, created, so
    that a profile calibrated later is used without a restart. A path: itself, which must exist (a CLIENT: an
    error). "builtin": the shipped profile of `model` (pipeline.profiles.builtin.resolve_builtin; None for a CLIENT,
    whose server applies its own, for a model with none shipped, and for one refused, with one line)."""
    from pipeline.errors import RunError, RunSettingError

    if value is None or str(value) == NO_PROFILE:
        return None
    if str(value) == BUILTIN_PROFILE:
        if mode == CLIENT or model is None:
            return None
        from pipeline.profiles.builtin import resolve_builtin

        return resolve_builtin(model)
    if str(value) == AUTO_PROFILE:
        path = profile_store()
        if mode == SERVE:
            path.mkdir(parents=True, exist_ok=True)
        elif mode == CLIENT or not any(path.glob(f"*{PROFILE_SUFFIX}")):
            return None
    elif mode == CLIENT:
        raise RunError(PROFILE_NEEDS_LOCAL_MODEL)
    else:
        path = Path(value).expanduser()
    if not path.exists():
        raise RunSettingError("profile", f"{value}: no such file or directory (make one with: nexus-agent calibrate)")
    if mode == LOCAL and path.is_dir() and not any(path.glob(f"*{PROFILE_SUFFIX}")):  # a run would use none
        raise RunSettingError(
            "profile",
            f"{value}: a folder with no memory profile (*{PROFILE_SUFFIX}) in it; make one with: nexus-agent calibrate",
        )
    from kvstore.profiles.profile import check_readable

    check_readable(path)  # a corrupt profile stops the run here, not in every task
    return path.resolve()
