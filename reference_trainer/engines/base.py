"""Rollout engines behind one small interface. The hybrid worker owns one engine per rank
and drives it through explicit transitions: wake_up → load_weights → generate →
release_kv_cache → sleep."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable

import torch


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


class RolloutEngine(ABC):
    @abstractmethod
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 sampling: SamplingConfig) -> torch.Tensor:
        """Left-padded prompts [B, P] → responses [B, max_new_tokens], right-padded with pad id."""

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy the actor's current weights into the engine."""

    @abstractmethod
    def sleep(self, level: int) -> None:
        """Give back rollout memory: level 1 keeps weights off-device, level 2 drops them."""

    @abstractmethod
    def wake_up(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        """Re-acquire the memory released by sleep (weights before a sync, then the KV cache)."""

    @abstractmethod
    def release_kv_cache(self) -> None:
        """Free the KV cache kept from the last generation."""

    @abstractmethod
    def memory_ledger(self, only=None) -> dict[str, int]:
        """Bytes held by category: rollout_weights, kv_cache; with `only`, those of its categories
        the engine need not measure may be left out."""


def make_engine(name: str, **kwargs) -> RolloutEngine:
    if name == "hf":
        from reference_trainer.engines.hf import HFEngine

        return HFEngine(**kwargs)
    if name == "vllm":
        from reference_trainer.engines.vllm import VLLMEngine

        return VLLMEngine(**kwargs)
    raise ValueError(f"unknown rollout engine {name!r}; accepted: hf, vllm")
