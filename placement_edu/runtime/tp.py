"""placeholder"""
TensorParallel = None
