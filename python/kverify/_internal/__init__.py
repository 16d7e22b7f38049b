"""Internal modules: the candidate worker process and its helpers. Not a public API."""
