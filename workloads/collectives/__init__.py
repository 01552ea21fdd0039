"""Collectives: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, measured as nccl-tests does."""
