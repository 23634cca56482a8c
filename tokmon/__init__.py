"""tokmon: a terminal live monitor for LLM inference servers."""

__version__ = "0.1.0"
