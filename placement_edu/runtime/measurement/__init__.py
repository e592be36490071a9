"""What each rank held and sent (the ledgers), and PyTorch's own accounting: its implementations
trained and measured, the memory trackers, the reference models, the activation profiles, CUDA's
allocator."""
