"""Attention: softmax(QKᵀ)V with GQA, named causal alignment, forward and backward."""
