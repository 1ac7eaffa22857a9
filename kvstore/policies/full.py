"""Full cache: keeps every token (the dense reference)."""

from kvstore.policies.base import Policy


class FullPolicy(Policy):
    name = "full"
    evicts = False
