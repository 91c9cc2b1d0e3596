"""Publishing: trainer-ready views (`views`: the registry; `rows`: the shared rule and each row; `writing`: Parquet splits), the dataset card (`card`), and the folder / Hub export (`hub`)."""
