"""prm-synth: synthesize step-level training data for process reward models."""

__version__ = "0.1.0"
