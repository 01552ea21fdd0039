"""Memory bandwidth: the STREAM kernels, the memory roof as the mamf sweep is the compute roof."""
