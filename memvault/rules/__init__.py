"""Layer 1, rules: the error hierarchy, naming and value rules, settings, the trust table, the secret detector,
escaping, time and file helpers. No I/O beyond files; imports nothing else of memvault."""
