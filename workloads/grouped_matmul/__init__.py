"""workload=grouped_matmul: a mixture of experts' expert GEMM (spec.py), through torch, xmfu's Triton kernel and JAX."""
