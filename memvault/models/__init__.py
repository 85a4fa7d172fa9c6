"""Layer 3, models: where vectors come from — loading an embedding model, the warm model process shared by
short-lived commands (the daemon), and the per-process engine that picks one of them."""
