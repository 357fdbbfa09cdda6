"""The `collective` workload: torch.distributed collectives' time and bandwidths, as nccl-tests define them."""
