"""`kaliper trace record`: a PyTorch execution trace recorded beside the same neighbour checks a run has
(`record`: the child and the monitoring around it), and the pure rules that judge the recording's timed
steps and decide to store it, record again or refuse (`judgement`)."""
