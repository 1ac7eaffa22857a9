"""Retired and experimental policy variants, kept to compare with (docs/memory.md tells their story): importing
this module registers them in kvstore's registry through its public hook, `register_policy`, as kvpress keeps its
evaluation registry outside the library. The product never imports it: `python research/nexus_agent.py bench replay
--specs ...` is `nexus-agent` with these registered.

    import research.policies  # then e.g. kvstore.make_cache(model, "nexus-agent-reply", budget=0.25)
"""

from __future__ import annotations

from kvstore import register_policy
from kvstore.policies import policy_defaults
from kvstore.policies.h2o import H2OPolicy
from kvstore.policies.nexus import NexusHeadPolicy, NexusPolicy
from kvstore.policies.nexus_agent import NexusAgentPolicy
from research.open_names import OpenNamesPolicy
from research.opening_window import OpeningWindowPolicy
from research.reply_peak import ReplyPeakPolicy
from research.statement_prior import StatementPriorPolicy
from research.task_names import TaskNamesPolicy
from research.task_surprise import TaskSurprisePolicy
from research.task_tail import TaskTailPolicy
from research.task_text import TaskTextPolicy
from research.template_level import TemplateLevelPolicy
from research.token_prior import TokenPriorPolicy

_TOPK_HALF_RECENT = {"selector": "topk", "recent_share": 0.5}  # what every earlier default memory shared
# today's default memory's options: the candidates below build on it (since one eviction per message went into the
# default, they evict once per message too: `@prefill_slack=0` reproduces a row measured before it; likewise
# `opening_recent_share=0.25`, `@opening_recent_share=none` before it; and `task_text_weight=1`, `@task_text_weight=0`
# before it)
_DEFAULT = policy_defaults("nexus-agent")

# name -> (policy class, option defaults that name implies)
VARIANTS = {
    "h2o-unnormalized": (H2OPolicy, {"h2o_normalize": False}),  # the H2O paper's raw accumulated attention
    "nexus-topk": (NexusPolicy, {"selector": "topk"}),  # ablation: Nexus score, deterministic top-K
    "direct-reservoir": (NexusPolicy, {"lam": 0.0}),  # ablation: direct score only (lambda = 0), reservoir
    "nexus-head": (NexusHeadPolicy, {"selector": "topk"}),  # variant: the Nexus score per kv head, top-K
    # the earlier default memories, oldest first: the current window's Nexus score only, top-K, half of the budget
    # recent; then each block's Nexus score averaged over every eviction step it was held in
    "nexus-agent-window": (NexusPolicy, _TOPK_HALF_RECENT),
    "nexus-agent-mean": (NexusPolicy, _TOPK_HALF_RECENT | {"score_memory": "mean"}),
    # then accumulated attention + that score (the first two terms of nexus-agent's score)
    "nexus-agent-acc": (NexusAgentPolicy, _TOPK_HALF_RECENT | {"score_memory": "mean", "reply_weight": 0.0}),
    # then the three attention terms, without the bonus for the agent's own tokens
    "nexus-agent-reply": (NexusAgentPolicy, _TOPK_HALF_RECENT | {"score_memory": "mean", "opening_nexus": False}),
    # issue 64's candidate: the default plus an observation window of each prefill chunk until the first reply
    "nexus-agent-openwin": (OpeningWindowPolicy, _DEFAULT),
    # issue 64's candidate: the default plus a prior over the opening from another harness's profile, by token id
    # the default itself under another name: research/opening_first_reply.py gives it a token prior as a profile
    "nexus-agent-tp": (NexusAgentPolicy, _DEFAULT),
    "nexus-agent-tokprior": (TokenPriorPolicy, _DEFAULT),
    # issue 64: the default with a matched profile's template weighted `template_scale` x against the task's text
    "nexus-agent-tlevel": (TemplateLevelPolicy, _DEFAULT),
    # issue 64: the default with a matched opening's task statement ranked by a prior by token id, blended
    "nexus-agent-sprior": (StatementPriorPolicy, _DEFAULT),
    # issue 64: the default with the task's code names found by other rules (research/task_names.py)
    "nexus-agent-names": (TaskNamesPolicy, _DEFAULT),
    # issue 64: the default with the code names of an opening no profile matched (research/open_names.py)
    "nexus-agent-opennames": (OpenNamesPolicy, _DEFAULT),
    # issue 64: the default plus the most one earlier reply attended each token (research/reply_peak.py)
    "nexus-agent-peak": (ReplyPeakPolicy, _DEFAULT | {"task_text_weight": 0.0}),  # as measured
    # issue 64: the default plus a bonus for every token of a matched opening's task text (research/task_text.py)
    "nexus-agent-task": (TaskTextPolicy, _DEFAULT | {"task_text_weight": 0.0}),  # the product's term, off
    # issue 64: the default with the opening's recent window counted back from the task text's end (task_tail.py)
    "nexus-agent-tail": (TaskTailPolicy, _DEFAULT | {"opening_recent_share": 0.0}),
    # issue 64: the default plus a bonus for the task text's most surprising tokens (research/task_surprise.py)
    "nexus-agent-surprise": (TaskSurprisePolicy, _DEFAULT),
}

for _name, (_cls, _defaults) in VARIANTS.items():
    register_policy(_name, _cls, **_defaults)
