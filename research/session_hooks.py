"""One hook for the research variants that need what the session knows once its opening is in (the token ids, the
task's span, the model): `after_append(hook)` makes every `Session.append` call `hook(session)` when it returns.
research/task_names.py, open_names.py and task_surprise.py hand their policies positions this way."""

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
