"""digit_shift: add a fixed shift to every digit, mod 10.  "3 1 4 =" -> "4 2 5" for shift=1.

Each answer digit depends only on the prompt digit a fixed distance back, and the reward gives
credit per position, so even a near-random policy gets some signal on every sample. In the first
learnability runs llama-tiny got only from ~0.05 to ~0.45 in 300 GRPO steps, so the demo does not
yet have a fast-learning setting for it.
"""

from __future__ import annotations

import numpy as np

from .base import Task, register_task, response_tokens


@register_task
class DigitShiftTask(Task):
    name = "digit_shift"

    def __init__(self, n_digits: int = 3, shift: int = 1):
        if not isinstance(n_digits, int) or not 1 <= n_digits <= 16:
            raise ValueError(f"n_digits={n_digits!r}; accepted: an int from 1 to 16")
        if not isinstance(shift, int) or not 1 <= shift <= 9:
            raise ValueError(f"shift={shift!r}; accepted: an int from 1 to 9")
        self.n_digits = n_digits
        self.shift = shift

    def _digits(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if n < 0:
            raise ValueError(f"n={n}; must be >= 0")
        return rng.integers(0, 10, size=(n, self.n_digits))

    def make_prompts(self, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
        digits = self._digits(n, rng)
        return [(_prompt(row), " ".join(str(d) for d in (row + self.shift) % 10)) for row in digits]

    def score(self, response_text: str, ground_truth: str) -> float:
        """Fraction of answer positions right; extra words count against it, so padding out an
        answer never pays: "4 2 5" -> 1, "4 9 5" -> 2/3, "4 2 5 5" -> 3/4."""
        got = response_tokens(response_text)
        want = ground_truth.split()
        right = sum(g == w for g, w in zip(got, want))
        return right / max(len(want), len(got))

    def sft_examples(self, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
        """Format only: the right number of *random* digits. The warm-started policy answers in the
        right shape but scores ~0.1 (chance per digit), so the RL run does all the task learning."""
        prompts = self._digits(n, rng)
        targets = self._digits(n, rng)
        return [(_prompt(p), " ".join(str(d) for d in t)) for p, t in zip(prompts, targets)]


def _prompt(row: np.ndarray) -> str:
    return " ".join(str(d) for d in row) + " ="
