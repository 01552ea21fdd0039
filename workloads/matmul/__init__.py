"""Matmul: the first workload, and how xmfu finds a machine's achievable peak (the `mamf` preset)."""
