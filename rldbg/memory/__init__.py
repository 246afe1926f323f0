"""Memory: probes (RSS, CUDA allocator, device used), NVML's per-process view, a background
sampler, and the leak rule shared by `rldbg report` and `rldbg top`."""
