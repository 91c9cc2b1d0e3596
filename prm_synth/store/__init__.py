"""Storage: atomic shards, the manifest and lock, readers, rows left open and refused problems, and the summary of a finished folder."""
