"""Grading: a final answer three-valued (correct, incorrect, unknown), with a bounded time per answer; a verification chain read step by step; labels against a known first error."""
