"""memrl: reinforcement learning for LLM agents that manage their own memory."""

__version__ = "0.1.0"
