"""The one base class of prm-synth's own errors, so a caller (the CLI) catches exactly what is ours.

Each error says what went wrong in words a user can act on; a bug is never one of these.
"""

from __future__ import annotations


class PrmSynthError(Exception):
    """Base of every error prm-synth raises on purpose (bad input, a failed engine, a refused folder)."""
