"""Grading a final answer: three-valued (correct, incorrect, unknown), with a bounded time per answer."""
