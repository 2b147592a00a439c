"""llamafleet: validator and GPU memory planner for llama-server + Claude Code setups."""

__version__ = "0.2.0"
