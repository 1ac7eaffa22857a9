"""PyramidKV (Cai et al. 2024): SnapKV's score with layer budgets decreasing linearly with depth, same total."""

from kvstore.policies.snapkv import SnapKVPolicy


class PyramidKVPolicy(SnapKVPolicy):
    name = "pyramidkv"

    def layer_budget(self, layer_idx: int, n_layers: int, budget_blocks: int) -> int:
        if n_layers <= 1:
            return budget_blocks
        spread = self.config.pyramid_spread
        frac = 1.0 + spread * (1.0 - 2.0 * layer_idx / (n_layers - 1))  # 1 + spread ... 1 - spread
        return max(1, round(budget_blocks * frac))
