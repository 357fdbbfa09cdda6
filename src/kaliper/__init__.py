"""Kaliper: benchmark ML software stacks on Kubernetes or on one machine."""

__version__ = "0.1.0"
