"""Sampling solutions: the sampling stage and the lossless step split."""
