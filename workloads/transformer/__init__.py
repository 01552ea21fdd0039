"""Dense transformer training step: one Llama-style model through torch, torch.compile, Triton and JAX."""
