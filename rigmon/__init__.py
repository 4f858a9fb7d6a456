"""rigmon: hardware-health monitoring for machines that train neural networks."""

__version__ = "0.2.0"
