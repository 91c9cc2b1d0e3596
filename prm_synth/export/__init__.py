"""Publishing: trainer-ready views (`views`), the dataset card (`card`), and the folder / Hub export (`hub`)."""
