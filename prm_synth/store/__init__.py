"""Storage: atomic shards, the manifest and lock, readers, resume decisions and the summary of a finished folder."""
