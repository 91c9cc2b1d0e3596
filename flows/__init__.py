"""Thin Prefect flows over the prm_synth library."""
