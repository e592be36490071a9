"""Timing this machine: collectives and compute on the ranks, the α–β fit, a GPU's achieved FLOP/s,
and a run's measured step time beside the predicted."""
