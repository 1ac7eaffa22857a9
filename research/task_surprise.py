"""The task's surprising tokens (issue 64, the first reply): `nexus-agent-surprise`.

What a first reply restates of a long statement and the default loses is mostly what the model could not have
guessed: `--noqa` after "the user tried `--no" (sqlfluff-1763, 12 of its 44 KL-tokens on one token), the digits of
`'\\u2192' in position 120`, "GHI and DHI are zero" (pvlib-1606). The code-name rule (kvstore.profiles.names) holds
identifiers, and in a statement with a long example or config file those fill the budget while the prose's flags and
numbers go. Prompt compression ranks tokens the same way (Selective Context, LLMLingua: keep the tokens of high
self-information): a token the model predicts from what precedes it can be written again without its own key and
value; one it does not predict cannot.

This variant gives the `surprise_share` of the task text's tokens with the highest surprisal (-log p of the token
given all before it, on the full opening) `surprise_weight` on top of the default's score. The surprisal is taken
once, when the opening is in (`patch_session`: a full forward of the opening, its logits read in chunks), on the
task text a matched profile leaves (ctx.task_span), else on nothing (no profile: the default's rule stands).

Measured (research/opening-issue64.md, section 15): the most surprising 20% in place of the names
(`@surprise_share=0.2,name_weight=0`) gives the first reply 13% less KL over the 40 conversations of
`deepseek-chat-swebench-test` and the whole conversation 4% more (later replies restate names); beside the names
it gains on one conversation and loses on most. Not taken.

    python research/task_surprise.py bench replay TRACES --system agent --profile builtin-v2-smollm2-135m.pt \\
        --specs 'nexus-agent-surprise@surprise_share=0.2' ...
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kvstore.errors import KVStoreError  # noqa: E402
from kvstore.policies.base import ScoreContext  # noqa: E402
from kvstore.policies.nexus_agent import NexusAgentPolicy, NexusAgentSettings  # noqa: E402
from research.session_hooks import once_task_is_in  # noqa: E402

CHUNK = 512  # positions per lm_head call: the logits of a whole opening at once would be tokens x vocabulary


@dataclass
class TaskSurpriseSettings(NexusAgentSettings):
    surprise_share: float = 0.2  # this share of the task text's tokens, the most surprising
    surprise_weight: float = 2.0  # their bonus (the code names' is 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.surprise_share <= 1.0 or self.surprise_weight < 0:
            raise KVStoreError(
                f"surprise_share must be in [0, 1] and surprise_weight >= 0, got {self.surprise_share}, "
                f"{self.surprise_weight}"
            )


class TaskSurprisePolicy(NexusAgentPolicy):
    name = "nexus-agent-surprise"
    settings_type = TaskSurpriseSettings

    def __init__(self, config, settings=None) -> None:
        super().__init__(config, settings)
        self.surprising: torch.Tensor | None = None  # positions, set by the patched session (`patch_session`)

    def score(self, ctx: ScoreContext) -> torch.Tensor:
        score = super().score(ctx)
        if self.surprising is None or self.settings.surprise_weight == 0:
            return score
        mask = torch.isin(ctx.positions, self.surprising.to(ctx.positions.device))
        return score + self.settings.surprise_weight * mask.to(score.dtype)


@torch.no_grad()
def surprisal(model, ids: list[int]) -> torch.Tensor:
    """[len(ids)] -log p(ids[i] | ids[:i]) under `model` (0 for the first token)."""
    x = torch.tensor([ids], device=model.device)
    hidden = model.model(input_ids=x).last_hidden_state[0]
    out = torch.zeros(len(ids))
    head = model.get_output_embeddings()
    for a in range(0, len(ids) - 1, CHUNK):
        b = min(a + CHUNK, len(ids) - 1)
        logp = head(hidden[a:b]).float().log_softmax(-1)
        out[a + 1 : b + 1] = -logp.gather(-1, x[0, a + 1 : b + 1, None]).squeeze(-1).cpu()
    return out


def most_surprising(nll: torch.Tensor, span: tuple[int, int], share: float) -> torch.Tensor:
    """The positions in [start, end) of the `share` of that span's tokens with the highest surprisal."""
    start, end = span
    k = int(round(share * (end - start)))
    if k <= 0:
        return torch.empty(0, dtype=torch.long)
    return start + torch.topk(nll[start:end], k).indices.sort().values


def patch_session() -> None:
    """Hand a TaskSurprisePolicy the most surprising positions of its session's task text once the opening is in."""

    def fill(session, policy: TaskSurprisePolicy, span: tuple[int, int]) -> None:
        nll = surprisal(session.model, session.tokens[: span[1]])
        policy.surprising = most_surprising(nll, span, policy.settings.surprise_share)

    once_task_is_in(TaskSurprisePolicy, "surprising", fill)


if __name__ == "__main__":
    import research.policies  # noqa: F401  (registers research.task_surprise's class, which this module is not)
    from cli.app import main
    from research.task_surprise import patch_session as patch

    patch()
    sys.argv[0] = "nexus-agent"
    main()
