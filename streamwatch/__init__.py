"""streamwatch: a real-time health monitor for reinforcement-learning training of LLMs."""

__version__ = "0.1.0"
