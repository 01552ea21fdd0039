"""Triton kernels, portable across NVIDIA and AMD; on a CPU they run in Triton's interpreter."""
