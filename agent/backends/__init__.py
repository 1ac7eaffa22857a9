"""Model backends: a local model over a kvstore session, a recorded-trajectory replay, an OpenAI-compatible server."""
