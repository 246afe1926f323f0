"""Profilers per role, rank and step: torch.profiler around selected calls (spec, torch_prof, merge,
tensorboard), CUDA memory snapshots (cuda_mem), and py-spy stacks and flame graphs of workers found
through the Ray dashboard (targets, pyspy, stacks, flamegraph)."""
