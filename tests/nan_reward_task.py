"""A user's own task whose verifier has a bug: on one reward rank, at one training step, the first
response it scores gets NaN. Tests run the trainer with data.task=nan_reward_task:NanOnceDigitShift
(tests/ is on every worker's PYTHONPATH, see conftest.py), the way a user's reward code breaks."""
from __future__ import annotations

import rldbg
from reference_trainer.tasks.digit_shift import DigitShiftTask


class NanOnceDigitShift(DigitShiftTask):
    def __init__(self, n_digits: int = 3, shift: int = 1, nan_step: int = 0, nan_rank: int = 0):
        super().__init__(n_digits=n_digits, shift=shift)
        self.nan_step, self.nan_rank = nan_step, nan_rank
        self.broke = False

    def score(self, response_text: str, ground_truth: str) -> float:
        ctx = rldbg.current()
        if not self.broke and ctx.rank == self.nan_rank and ctx.step == self.nan_step:
            self.broke = True
            return float("nan")
        return super().score(response_text, ground_truth)
