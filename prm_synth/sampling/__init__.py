"""Sampling solutions: the policy prompt, the sampling stage, the lossless step split and reasoning traces."""
