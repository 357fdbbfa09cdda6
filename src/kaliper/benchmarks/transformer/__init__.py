"""transformer-train and transformer-infer: a GPT-style decoder in PyTorch (model, FLOP formulas, the two
workloads)."""
