"""Inference on the training step's model: prefill and greedy decode against a static KV cache."""
