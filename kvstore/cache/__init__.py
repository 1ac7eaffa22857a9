"""The evicting KV cache: a transformers `Cache` whose layers evict under a budget (`evicting`), one layer
(`layer`), one eviction step (`eviction`: the policy's scores -> the kept set), the cache's settings (`config`), what
a session tells it (`signals`), its statistics, snapshot for saving, the attention capture and chunked prefill. The
attention maths it runs lives in kvstore.attention, the scores and selectors in kvstore.policies.
"""
