"""Rollout with transformers' generate (KV cache on), on CPU or GPU. The engine keeps its
own copy of the weights, as a separate inference engine would, so weight sync is a real
copy and sleep/wake really give memory back."""
from __future__ import annotations

from typing import Iterable

import torch

from reference_trainer.engines.base import RolloutEngine, SamplingConfig
from reference_trainer.workers.offload import Offloader


class HFEngine(RolloutEngine):
    def __init__(self, model, pad_token_id: int, eos_token_id: int, offloader: Offloader | None = None):
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pad_id, self.eos_id = pad_token_id, eos_token_id
        self._offloader = offloader
        self._cache = None
        self._weights_state = "awake"  # awake | offloaded | dropped
        self._params = list(self.model.parameters()) + list(self.model.buffers())

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, sampling: SamplingConfig):
        if self._weights_state != "awake":
            raise RuntimeError(f"rollout engine is asleep ({self._weights_state}); call wake_up() and sync weights first")
        from transformers import DynamicCache

        self._cache = DynamicCache()
        out = self.model.generate(
            input_ids=input_ids, attention_mask=attention_mask, past_key_values=self._cache,
            do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
            max_new_tokens=sampling.max_new_tokens, pad_token_id=self.pad_id, eos_token_id=self.eos_id,
            use_cache=True,
        )
        responses = out[:, input_ids.shape[1]:]
        missing = sampling.max_new_tokens - responses.shape[1]
        if missing > 0:  # generation stopped early for the whole batch
            responses = torch.nn.functional.pad(responses, (0, missing), value=self.pad_id)
        return responses

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        own = dict(self.model.named_parameters())
        own.update(dict(self.model.named_buffers()))
        seen = 0
        for name, tensor in named_tensors:
            if name not in own:
                raise KeyError(f"rollout engine has no weight named {name!r}")
            target = own[name]
            if target.data.numel() == 0:  # dropped by sleep(level=2): allocate again
                target.data = torch.empty_like(tensor, device=target.device)
            target.data.copy_(tensor)
            seen += 1
        if seen != len(own):
            raise ValueError(f"weight sync gave {seen} tensors; the rollout model has {len(own)}")
        self._weights_state = "awake"

    def sleep(self, level: int) -> None:
        self.release_kv_cache()
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
        self._cache = None

    def memory_ledger(self) -> dict[str, int]:
        weights = sum(t.numel() * t.element_size() for t in self._params)
        kv = 0
        if self._cache is not None:
            for layer in getattr(self._cache, "layers", []):
                for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                    if isinstance(t, torch.Tensor):
                        kv += t.numel() * t.element_size()
        return {"rollout_weights": weights, "kv_cache": kv}
