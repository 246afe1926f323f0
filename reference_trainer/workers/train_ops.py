"""Forward passes and the mini-batch update loop shared by the actor and the critic.

Data-parallel gradients are all-reduced by hand (one flat buffer per step) rather than with
DDP, so the same code runs colocated, offloaded and on gloo or nccl; the loss is scaled by
a global denominator so its gradient does not depend on the number of ranks."""
from __future__ import annotations

import functools
import itertools
import operator
import weakref
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from reference_trainer import algos
from reference_trainer.protocol import DataProto


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # Prompts are left-padded: positions count real tokens only, as generate() does.
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logprobs(model, input_ids, attention_mask, response_len: int, temperature: float = 1.0,
                      with_entropy: bool = False):
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids(attention_mask)).logits
    logits = logits[:, -response_len - 1:-1].float() / temperature
    logp = algos.logprobs_from_logits(logits, input_ids[:, -response_len:])
    entropy = algos.entropy_from_logits(logits) if with_entropy else None
    return logp, entropy


def response_values(model, input_ids, attention_mask, response_len: int) -> torch.Tensor:
    values = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids(attention_mask)).logits.squeeze(-1)
    # The value of the state before each response token is read at the previous position.
    return values[:, -response_len - 1:-1].float()


def response_mask_from(responses: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 up to and including the first EOS, 0 after it."""
    is_eos = (responses == eos_id).long()
    before_or_at_first_eos = (is_eos.cumsum(-1) - is_eos) == 0
    return before_or_at_first_eos.to(torch.float32)


def loss_mask(batch: DataProto) -> torch.Tensor:
    """Response mask with padding rows (from uneven data parallelism) zeroed out."""
    mask = batch.tensors["response_mask"]
    return mask * batch.valid_mask().to(mask.device, mask.dtype).unsqueeze(-1)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def sync_gradients(params: list[torch.Tensor], weight: float) -> None:
    """Gradients of the mini-batch's global mean from each rank's gradient of its own mean:
    weigh each rank's by its count (`weight`), sum over ranks, divide by the summed count. The
    count rides in the same all-reduce as the gradients, so a mini-batch needs one collective
    (the ranks meet once) rather than a count all-reduce before the forward pass and a gradient
    one after it."""
    world = world_size()
    if world == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads] + [torch.ones(1, dtype=grads[0].dtype, device=grads[0].device)])
    flat *= weight
    dist.all_reduce(flat)
    flat /= max(float(flat[-1]), 1.0)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(p)   # disjoint views of one buffer: no copy per tensor
        offset += n


def local_count(mask: torch.Tensor, agg_mode: str) -> float:
    """What a loss is normalised by: tokens, or sequences with any token."""
    return float(mask.sum() if agg_mode == "token-mean" else (mask.sum(-1) > 0).sum())


def local_scale(mask: torch.Tensor, agg_mode: str, denom: float, world: int) -> float:
    """Factor turning a loss normalised by `denom` (agg_loss's global_denominator, times the
    world size) back into this micro-batch's own mean, for reporting."""
    local = local_count(mask, agg_mode)
    return denom / (world * local) if local else 0.0


def minibatch_update(batch: DataProto, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     global_mini_batch: int, micro_batch: int, epochs: int, grad_clip: float,
                     agg_mode: str, loss_fn: Callable[[DataProto, float, int], tuple[torch.Tensor, dict]]) -> dict:
    """PPO-style update: for each epoch, for each mini-batch, accumulate micro-batch gradients,
    all-reduce them, clip and step. Every rank runs the same number of mini-batches."""
    world = world_size()
    n_mini = max(1, round(len(batch) * world / global_mini_batch))
    params = [p for p in model.parameters() if p.requires_grad]
    metrics: dict[str, list[float]] = {}
    for _ in range(epochs):
        for mini in _split(batch, n_mini):
            # Each rank normalises by its own count (world × count, in agg_loss's terms);
            # sync_gradients then weighs the ranks by their counts: the global mean's gradient.
            count = local_count(loss_mask(mini), agg_mode)
            denom = max(count, 1.0) * world
            optimizer.zero_grad(set_to_none=True)
            for micro in _split(mini, max(1, -(-len(mini) // micro_batch))):
                loss, stats = loss_fn(micro, denom, world)
                loss.backward()
                for k, v in stats.items():
                    metrics.setdefault(k, []).append(float(v))
            sync_gradients(params, count)
            norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            metrics.setdefault("grad_norm", []).append(float(norm))
    optimizer.zero_grad(set_to_none=True)
    return metrics


def micro_sizes(n: int, micro: int) -> list[int]:
    """Row counts of consecutive micro-batches of at most `micro` rows covering n rows."""
    return [min(micro, n - i) for i in range(0, n, micro)] or [0]


def _split(batch: DataProto, parts: int) -> list[DataProto]:
    n = len(batch)
    parts = min(parts, n) if n else 1
    sizes = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    return batch.split(sizes)


def broadcast_module(module: torch.nn.Module) -> None:
    """Make every rank start from rank 0's weights."""
    if world_size() == 1:
        return
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src=0)


def adamw(params, **kwargs) -> torch.optim.AdamW:
    """AdamW with the fused kernel (CPU and CUDA): one pass over all parameters instead of a
    Python loop of small ops per tensor, ~6x faster a step for the tiny models here."""
    return torch.optim.AdamW(params, fused=True, **kwargs)


_nbytes, _is_cuda, _grad = operator.attrgetter("nbytes"), operator.attrgetter("is_cuda"), operator.attrgetter("grad")
_not_none = functools.partial(operator.is_not, None)


def tensor_bytes(tensors, device: torch.device | None = None) -> int:
    """Element bytes of the tensors; with `device`, of those on that kind of device only (what an
    offload to the host takes off the GPU leaves the ledger's GPU figure, as it leaves the GPU).
    Traced runs count a few hundred tensors at every transition on the training thread: map and
    filter with attribute getters visit each at C speed, about 4x faster than a generator."""
    if device is not None and not isinstance(device, torch.device):
        device = torch.device(device)   # only then: building one costs more than counting a small model's tensors
    on_gpu = device is not None and device.type == "cuda"
    if device is None or not torch.cuda.is_initialized():   # all of them; or no GPU tensor here to ask about
        return 0 if on_gpu else sum(map(_nbytes, tensors))
    return sum(map(_nbytes, (filter if on_gpu else itertools.filterfalse)(_is_cuda, tensors)))


def grads(params) -> Iterator[torch.Tensor]:
    """The parameters' gradients that exist."""
    return filter(_not_none, map(_grad, params))


_listed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # optimizer -> (state, its size, tensors)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's per-parameter state tensors (Adam's moments; not its 0-d step counters).
    Listed again only when the state changes shape: a parameter's first step adds its entry, and
    load_state_dict replaces the whole dict. In between the same tensor objects stay (updates are
    in place and an offload swaps .data), and a traced run counts them at every transition, on
    the training thread, where walking the dicts cost more than counting the bytes."""
    state = optimizer.state
    seen = _listed.get(optimizer)
    if seen is None or seen[0] is not state or seen[1] != len(state):
        tensors = [v for entry in state.values() for v in entry.values()
                   if isinstance(v, torch.Tensor) and v.dim() > 0]
        seen = _listed[optimizer] = (state, len(state), tensors)
    return seen[2]
