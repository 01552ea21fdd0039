"""xmfu's measurement engine: it times any workload the same way and knows nothing about any one workload."""

__version__ = "0.1.0"
