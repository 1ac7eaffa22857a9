"""Models: the registry (the offline default, HF ids, local folders; `registry`), GGUF models split over PyPI
packages (`gguf_parts`) and tiny random-weight models of the supported architectures (`tiny`, for tests, quick
checks and the GPU benchmark's shapes).
"""
