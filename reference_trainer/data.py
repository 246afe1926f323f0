"""Prompt batches for RL steps and supervised batches for the warm start, made in code."""
from __future__ import annotations

import numpy as np
import torch

from reference_trainer.protocol import DataProto


class PromptSource:
    """One step's prompts: `prompts_per_step` task prompts, each repeated `group_size` times
    (adjacent, sharing a uid). Seeded by (seed, step) so a resumed run sees the same data."""

    def __init__(self, task, tokenizer, prompts_per_step: int, group_size: int, seed: int):
        self.task, self.tokenizer = task, tokenizer
        self.n, self.group, self.seed = prompts_per_step, group_size, seed

    def batch(self, step: int) -> DataProto:
        rng = np.random.default_rng([self.seed, step])
        pairs = self.task.make_prompts(self.n, rng)
        texts = [p for p, _ in pairs]
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        proto = DataProto.from_dict(
            tensors={"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]},
            non_tensors={"prompt": texts, "ground_truth": [t for _, t in pairs],
                         "uid": [f"{step}:{i}" for i in range(self.n)]},
        )
        return proto.repeat(self.group, interleave=True)


def sft_batch(task, tokenizer, n: int, rng: np.random.Generator, response_len: int) -> DataProto:
    """Prompt + target laid out like a rollout (left-padded prompt, right-padded response
    ending in EOS), so the actor's log-prob code trains on it unchanged."""
    pairs = task.sft_examples(n, rng)
    enc = tokenizer([p for p, _ in pairs], padding=True, return_tensors="pt")
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    responses = torch.full((n, response_len), pad, dtype=torch.long)
    mask = torch.zeros((n, response_len), dtype=torch.float32)
    for i, (_, target) in enumerate(pairs):
        ids = tokenizer(target, add_special_tokens=False)["input_ids"][: response_len - 1] + [eos]
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1.0
    return DataProto.from_dict(tensors={
        "prompts": enc["input_ids"], "responses": responses,
        "input_ids": torch.cat([enc["input_ids"], responses], -1),
        "attention_mask": torch.cat([enc["attention_mask"], mask.long()], -1),
        "response_mask": mask,
    })
