"""The evicting KV cache: a transformers `Cache` whose layers evict under a budget (`evicting`), one layer
(`layer`), one eviction step (`eviction`, `scoring`, `selection`), the cache's settings (`config`), what a session
tells it (`signals`), its statistics, snapshot for saving, the attention capture and chunked prefill.
"""
