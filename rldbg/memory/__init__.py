"""Memory: probes (RSS, CUDA allocator, device used), a background sampler, and byte counts
for the ledger (bytes by category per role/rank, reported through rldbg.instrument.ledger)."""
from rldbg.memory.probes import rss_bytes, sample
from rldbg.memory.sizes import grad_bytes, module_bytes, optimizer_state_bytes, tensor_bytes

__all__ = ["rss_bytes", "sample", "tensor_bytes", "module_bytes", "grad_bytes", "optimizer_state_bytes"]
