"""PyramidKV (Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
Funneling"): SnapKV's score and window, with layer budgets decreasing linearly with depth, same total.

Defaults and their sources (the authors' code, Zefan-Cai/PyramidKV pyramidkv_utils.py; kvpress PyramidKVPress):
- pyramid_beta = 20: of the budget beyond the window (C tokens per layer on average) the last layer keeps C / beta
  and the first 2C - C / beta, linear in between, so the mean over layers is C (here rounded so the sum is exact).
- window = 32 and pool_kernel = 5 as SnapKV's code (PyramidKV's code and kvpress use a 64-token window).
- pyramid_spread (legacy, this project's earlier shape): layer budgets (1 + spread) ... (1 - spread) x budget.
"""

from kvstore.policies.snapkv import SnapKVPolicy


class PyramidKVPolicy(SnapKVPolicy):
    name = "pyramidkv"

    def layer_budgets(self, tokens: int, n_layers: int) -> list[int]:
        if n_layers <= 1:
            return [tokens]
        spread = self.config.pyramid_spread
        if spread is not None:
            fracs = [1.0 + spread * (1.0 - 2.0 * i / (n_layers - 1)) for i in range(n_layers)]
            return [max(1, round(tokens * f)) for f in fracs]
        forced = self.sink_tokens() + self.recent_tokens(tokens)
        c = max(0, tokens - forced)
        lo = c / self.config.pyramid_beta
        hi = 2 * c - lo
        shares = [hi - i * (hi - lo) / (n_layers - 1) for i in range(n_layers)]
        cum = [0.0]
        for s in shares:
            cum.append(cum[-1] + s)
        return [forced + round(cum[i + 1]) - round(cum[i]) for i in range(n_layers)]
