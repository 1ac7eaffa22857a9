"""One hook for the research variants that need what the session knows once its opening is in (the token ids, the
task's span, the model): `after_append(hook)` makes every `Session.append` call `hook(session)` when it returns.
research/task_names.py, open_names.py and task_surprise.py hand their policies positions this way
(`once_task_is_in` for the two that fill a policy's positions from the task's span)."""

from __future__ import annotations

from collections.abc import Callable


def after_append(hook: Callable) -> None:
    """Patch kvstore's Session so that each append ends with `hook(session)` (for the process's lifetime; a test
    restores `Session.append` itself)."""
    from kvstore.session.session import Session

    append = Session.append

    def patched(self, messages, encode=None):
        append(self, messages, encode)
        hook(self)

    Session.append = patched


def once_task_is_in(policy_type: type, attr: str, fill: Callable) -> None:
    """`after_append` a hook that calls `fill(session, policy, task_span)` for a session whose cache policy is a
    `policy_type` still without `attr` (None), once the session knows its task's span."""

    def hook(session) -> None:
        policy = getattr(session.cache, "policy", None)
        signals = getattr(session.cache, "signals", None)
        if isinstance(policy, policy_type) and getattr(policy, attr) is None and signals is not None:
            if signals.task_span is not None:
                fill(session, policy, signals.task_span)

    after_append(hook)
