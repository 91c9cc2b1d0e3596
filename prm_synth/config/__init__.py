"""The pipeline's configuration: one model per section, the fingerprint's inputs, upgrades of older files and the diff between two."""
