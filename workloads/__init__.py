"""Workloads: one package per workload, a backend-neutral spec plus one module per backend."""
