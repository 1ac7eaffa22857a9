"""The task's code names for an opening no profile matched (issue 64, part 2: agents with no profile): how the
product's rule was selected (research/opening-issue64.md, section 8). The product now does this itself
(Session._read_opening, with the names rule that followed), so after commit e8ac64c the patch below finds the names
already set and `nexus-agent-opennames` is the default under another name; the section's research rows came from
that commit.

The default gave the code names of the task's text `name_weight` only where a memory profile matched the opening,
because only then does the session know where the task's text lies (SessionSignals.task_span). Without a profile
(a served harness nobody calibrated, a chat) the task is still in the first user message. Policy
`nexus-agent-opennames` is the default; this script runs it with the session patched to find the names in the
whole first user message (the harness's own instructions in it too) when no profile matched:

    python research/open_names.py bench replay TRACES --system agent \\
        --specs 'nexus-agent-opennames@profile=none;nexus-agent@profile=none' ...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvstore.policies.nexus_agent import NexusAgentPolicy  # noqa: E402
from kvstore.profiles.names import name_positions  # noqa: E402
from research.session_hooks import after_append  # noqa: E402


class OpenNamesPolicy(NexusAgentPolicy):
    """The default memory; a session patched by `patch_session` gives it the names of an unmatched opening."""

    name = "nexus-agent-opennames"


def user_span(session) -> tuple[int, int] | None:
    """[start, end) of the first user message's text in the session's tokens (after its role header's line), or
    None before the opening is in."""
    roles = [m["role"] for m in session.messages]
    if "user" not in roles:
        return None
    first = roles.index("user")
    render = session.renderer.encode_messages
    start = len(render(session.messages[:first], first=True)) if first else 0
    end = len(render(session.messages[: first + 1], first=True)) - len(session.renderer.end_of_turn_ids)
    pieces = session.tokenizer.batch_decode([[t] for t in session.tokens[start:end]])
    header = next((i + 1 for i, p in enumerate(pieces) if "\n" in p), 0)  # "<|im_start|>user\n"
    return start + header, end


def patch_session() -> None:
    """Give an OpenNamesPolicy session the code names of its first user message once the opening is in, when no
    profile gave it the task's names."""

    def hand_over(session) -> None:
        signals = getattr(session.cache, "signals", None)
        if signals is None or signals.names or session.config.policy != OpenNamesPolicy.name:
            return
        span = user_span(session)
        if span is not None and signals.task_span is None:
            signals.names = name_positions(session.tokenizer, session.tokens, span)

    after_append(hand_over)


if __name__ == "__main__":
    import research.policies  # noqa: F401  (registers research.open_names's class, which this module is not)
    from cli.app import main
    from research.open_names import patch_session as patch

    patch()
    sys.argv[0] = "nexus-agent"
    main()
