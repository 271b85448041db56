"""Scoring on a shared vLLM server: the HTTP client, the wire format, remote sessions
and sampling, and the backend that plugs them into the engine's protocols. The
tokenizer stays local; only token ids and log-probabilities cross the network.
"""
