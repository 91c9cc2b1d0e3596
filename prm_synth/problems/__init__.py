"""Problem sources: loaders for every supported input (the builtin arithmetic problems come from prm_synth/simulated/)."""
