"""recombine: a PyTorch laboratory for compositional and systematic generalization research."""

__version__ = "0.1.0"
