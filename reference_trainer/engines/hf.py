"""Rollout with transformers' generate (KV cache on), on CPU or GPU. The engine keeps its
own copy of the weights, as a separate inference engine would, so weight sync is a real
copy and sleep/wake really give memory back."""
from __future__ import annotations

import functools
import inspect
from typing import Iterable

import torch

from reference_trainer.engines.base import RolloutEngine, SamplingConfig
from reference_trainer.workers.offload import Offloader
from reference_trainer.workers.train_ops import tensor_bytes


class HFEngine(RolloutEngine):
    def __init__(self, model, pad_token_id: int, eos_token_id: int, offloader: Offloader | None = None):
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pad_id, self.eos_id = pad_token_id, eos_token_id
        self._offloader = offloader
        self._cache = None
        self._weights_state = "awake"  # awake | offloaded | dropped | loading (a sync under way)
        self._params = list(self.model.parameters()) + list(self.model.buffers())
        self._device = self._params[0].device if self._params else torch.device("cpu")
        self._loaded_bytes = None   # what the last load_weights gave the weights, while it holds

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, sampling: SamplingConfig):
        """Sampling with a KV cache, written out rather than through transformers' generate():
        the same distribution (logits / temperature, then top-p, then a multinomial draw), but
        without generate()'s per-call set-up (config validation, logits-processor and
        stopping-criteria lists), which cost more than the forward passes themselves for the
        demo's short answers."""
        if self._weights_state != "awake":
            raise RuntimeError(f"rollout engine is asleep ({self._weights_state}); call wake_up() and sync weights first")
        from transformers import DynamicCache

        self._cache = DynamicCache()
        cache = {_cache_keyword(self.model): self._cache}
        rows, n_new = input_ids.shape[0], sampling.max_new_tokens
        responses = torch.full((rows, n_new), self.pad_id, dtype=input_ids.dtype, device=input_ids.device)
        if n_new == 0:
            return responses
        mask = attention_mask
        # Left-padded prompts: positions count real tokens only (as generate() and training do).
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        next_pos = positions[:, -1:] + 1
        done = torch.zeros(rows, dtype=torch.bool, device=input_ids.device)
        # GRPO repeats each prompt group_size times: the prompt's forward pass (its KV cache and
        # the first token's logits) is computed once per distinct prompt and shared by its copies.
        unique, inverse = torch.unique(torch.cat([input_ids, mask.to(input_ids.dtype)], -1), dim=0,
                                       return_inverse=True)
        if len(unique) < rows:
            # Any row of each distinct prompt represents it: the copies are identical.
            first = torch.empty(len(unique), dtype=torch.long, device=inverse.device).scatter_(
                0, inverse, torch.arange(rows, device=inverse.device))
            logits = self.model(input_ids=input_ids[first], attention_mask=mask[first],
                                position_ids=positions[first], **cache, use_cache=True,
                                logits_to_keep=1).logits[inverse]
            self._cache.batch_select_indices(inverse)
        else:
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                **cache, use_cache=True, logits_to_keep=1).logits
        ones = torch.ones((rows, 1), dtype=mask.dtype, device=mask.device)
        for i in range(n_new):
            token = _sample(logits[:, -1].float(), sampling.temperature, sampling.top_p)
            token = token.masked_fill(done, self.pad_id)   # finished rows are padded, as generate() does
            responses[:, i] = token
            done |= token == self.eos_id
            if i == n_new - 1 or bool(done.all()):
                break
            mask = torch.cat([mask, ones], -1)
            logits = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos,
                                **cache, use_cache=True).logits
            next_pos = next_pos + 1
        return responses

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        own = dict(self.model.named_parameters())
        own.update(dict(self.model.named_buffers()))
        if self._weights_state == "dropped":
            self._weights_state = "loading"   # from here on weights get storage again (memory_ledger)
        seen = loaded = 0
        self._loaded_bytes = None
        for name, tensor in named_tensors:
            if name not in own:
                raise KeyError(f"rollout engine has no weight named {name!r}")
            target = own[name]
            if target.data.numel() == 0:  # dropped by sleep(level=2): allocate again
                target.data = torch.empty_like(tensor, device=target.device)
            target.data.copy_(tensor)
            # Counted here, each weight just written: the ledger's walk after the copy would find
            # them evicted from the caches by the copy itself.
            loaded += target.nbytes if target.device.type == self._device.type else 0   # as tensor_bytes counts
            seen += 1
        if seen != len(own):
            raise ValueError(f"weight sync gave {seen} tensors; the rollout model has {len(own)}")
        self._weights_state, self._loaded_bytes = "awake", loaded

    def sleep(self, level: int) -> None:
        self._cache = self._loaded_bytes = None
        if level == 1 and self._offloader is not None:
            self._offloader.offload("rollout_weights", self._params)
            self._weights_state = "offloaded"
        elif level == 2:
            for t in self._params:
                t.data = torch.empty(0, dtype=t.dtype, device=t.device)
            self._weights_state = "dropped"
        if self._offloader is not None:
            self._offloader.give_back_memory()

    def wake_up(self, tags=("weights", "kv_cache")) -> None:
        if "weights" in tags and self._weights_state == "offloaded":
            self._offloader.reload("rollout_weights")
            self._weights_state = "awake"
        # "dropped" weights come back with the next load_weights; the HF cache is built per generate.

    def release_kv_cache(self) -> None:
        if self._cache is None:
            return
        self._cache = None
        if self._offloader is not None:
            self._offloader.give_back_memory()

    def memory_ledger(self, only=None) -> dict[str, int]:
        out = {}
        if only is None or "rollout_weights" in only:
            # On the compute device only: weights a level-1 sleep put on the host have left it. A
            # level-2 sleep left every weight empty, which saves a walk over them (cold, on the
            # training thread, ~0.1 ms a report) while they stay dropped.
            dropped, loaded = self._weights_state == "dropped", self._loaded_bytes
            out["rollout_weights"] = (0 if dropped else loaded if loaded is not None
                                      else tensor_bytes(self._params, self._device))
        if only is None or "kv_cache" in only:
            kv = 0
            if self._cache is not None:
                for layer in getattr(self._cache, "layers", []):
                    for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                        if isinstance(t, torch.Tensor):
                            kv += t.numel() * t.element_size()
            out["kv_cache"] = kv
        return out


@functools.lru_cache(maxsize=8)
def _forward_takes_cache(model_class: type) -> bool:
    return "cache" in inspect.signature(model_class.forward).parameters


def _cache_keyword(model) -> str:
    """The forward keyword for the KV cache: `cache` where the model's forward takes it (newer
    transformers, where `past_key_values` still works but warns on every call), else
    `past_key_values` (every older version pyproject allows)."""
    return "cache" if _forward_takes_cache(type(model)) else "past_key_values"


def _sample(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), restricted to the smallest set of
    tokens whose probability reaches top_p (the most likely token always stays)."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, -1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        # Drop a token when the tokens ranked before it already reach top_p.
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return torch.multinomial(probs, 1).squeeze(-1)
