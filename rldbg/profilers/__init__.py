"""Profilers per role, rank and step.

spec        RLDBG_PROFILE: which (role, rank, step, method) calls to profile
torch_prof  profile_call(): torch.profiler around a selected call, TensorBoard layout
merge       torch operators into rldbg's Perfetto trace, nested in the call spans
tensorboard start TensorBoard on loopback and read its profiler plugin's API
cuda_mem    opt-in CUDA allocator snapshots around hybrid-engine transitions
targets     worker processes by role/rank, through the Ray dashboard
pyspy       py-spy dump/record, locally or as the dashboard returns it
stacks      many workers' stacks, identical ones grouped
flamegraph  collapsed stacks -> speedscope JSON and SVG
"""
