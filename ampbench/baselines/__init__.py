"""Per-GPU baseline files: their entries, schema, learned spread and rendering."""
