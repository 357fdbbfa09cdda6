"""trace-replay: a recorded PyTorch execution trace replayed operator by operator."""
