"""Problem sources: loaders for every supported input, and the arithmetic world of the simulated policy."""
