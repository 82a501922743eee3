"""One module per study; each function returns a pandas DataFrame with one row per measurement."""
