"""PyramidKV (Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
Funneling"): SnapKV's score and window, with layer budgets decreasing linearly with depth, same total.

Defaults and their sources (the authors' code, Zefan-Cai/PyramidKV pyramidkv_utils.py; kvpress PyramidKVPress):
- beta = 20 (option `pyramid_beta`): of the budget beyond the window (C tokens per layer on average) the last layer
  keeps C / beta and the first 2C - C / beta, linear in between, so the mean over layers is C (here rounded so the sum
  is exact).
- window = 32 and pool_kernel = 5 as SnapKV's code (PyramidKV's code and kvpress use a 64-token window).
"""

from dataclasses import dataclass

from kvstore.errors import KVStoreError
from kvstore.policies.settings import named
from kvstore.policies.snapkv import SnapKVPolicy, SnapKVSettings


@dataclass
class PyramidKVSettings(SnapKVSettings):
    beta: float = named("pyramid_beta", 20.0)  # the last layer's share of the budget beyond the window is 1/beta

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta < 1:
            raise KVStoreError(f"pyramid_beta must be >= 1, got {self.beta}")


class PyramidKVPolicy(SnapKVPolicy):
    name = "pyramidkv"
    settings_type = PyramidKVSettings

    def layer_budgets(self, tokens: int, n_layers: int) -> list[int]:
        if n_layers <= 1:
            return [tokens]
        forced = self.sink_tokens() + self.recent_tokens(tokens)
        c = max(0, tokens - forced)
        lo = c / self.settings.beta
        hi = 2 * c - lo
        shares = [hi - i * (hi - lo) / (n_layers - 1) for i in range(n_layers)]
        cum = [0.0]
        for s in shares:
            cum.append(cum[-1] + s)
        return [forced + round(cum[i + 1]) - round(cum[i]) for i in range(n_layers)]
