"""Redis plumbing shared by sessions and memory: scripts, JSON codec, clients, URLs."""
