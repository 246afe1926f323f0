"""The reward role: decodes responses and scores them with the task's rule-based verifier
(a built-in task, or the user's own Task subclass named by data.task=MODULE:CLASS)."""
from __future__ import annotations

import torch

from reference_trainer.protocol import DataProto
from reference_trainer.single_controller import Dispatch, Worker, register
from reference_trainer.tasks import get_task
from reference_trainer.workers.hybrid import load_tokenizer_for


class RewardWorker(Worker):
    role = "reward"

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        self.tokenizer = load_tokenizer_for(self.config.model.preset)
        self.task = get_task(self.config.data.task, **self.config.data.task_args)
        return {"task": self.task.name}

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_scores(self, batch: DataProto) -> DataProto:
        responses = batch.tensors["responses"]
        mask = batch.tensors["response_mask"].bool()
        truths = batch.non_tensors["ground_truth"]
        scores = []
        for ids, m, truth in zip(responses, mask, truths):
            text = self.tokenizer.decode(ids[m].tolist(), skip_special_tokens=True)
            scores.append(self.task.score(text, truth))
        scores = torch.tensor(scores, dtype=torch.float32)
        return DataProto.from_dict(tensors={"scores": scores})
