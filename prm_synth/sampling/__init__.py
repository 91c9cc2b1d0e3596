"""Sampling solutions: the sampling stage (split and graded), and the policy's majority answer as gold where there is none."""
