"""The newer axes run for real: tensor ranks under PyTorch's trackers, a toy causal attention layer
on context ranks, a toy mixture-of-experts layer on expert ranks."""
