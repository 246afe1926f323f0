"""count_up: continue counting from a digit, mod 10.  "7 =" -> "8 9 0 1" for length=4, step=1.

Each answer digit follows from the one before it, and there are only ten prompts, so this is meant
as an easier RL task than digit_shift; a setting where llama-tiny learns it quickly is still to be
found. Scoring gives credit per position, so a half-right answer is worth half.
"""

from __future__ import annotations

import numpy as np

from .base import Task, register_task, response_tokens


@register_task
class CountUpTask(Task):
    name = "count_up"

    def __init__(self, length: int = 4, step: int = 1):
        if not isinstance(length, int) or not 1 <= length <= 16:
            raise ValueError(f"length={length!r}; accepted: an int from 1 to 16")
        if not isinstance(step, int) or not 1 <= step <= 9:
            raise ValueError(f"step={step!r}; accepted: an int from 1 to 9")
        self.length = length
        self.step = step

    def _answer(self, start: int) -> str:
        return " ".join(str((start + self.step * k) % 10) for k in range(1, self.length + 1))

    def make_prompts(self, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
        if n < 0:
            raise ValueError(f"n={n}; must be >= 0")
        return [(f"{s} =", self._answer(int(s))) for s in rng.integers(0, 10, size=n)]

    def score(self, response_text: str, ground_truth: str) -> float:
        """Fraction of answer positions right; extra words count against it:
        "8 9 0 1" -> 1, "8 5 0 1" -> 3/4, "8 9 0 1 2" -> 4/5.

        Positions are judged against the true answer, not against the word before them: a
        "right step from a wrong word" rule let GRPO settle on prompt-independent answers such as
        "1 2 1 2" (reward ~0.5), which never led on to the real rule.
        """
        got = response_tokens(response_text)
        want = ground_truth.split()
        right = sum(g == w for g, w in zip(got, want))
        return right / max(len(want), len(got))

    def sft_examples(self, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
        """Format only: `length` random digits. The warm-started policy answers in the right shape
        at chance level (~0.1), so the RL run does all the task learning."""
        if n < 0:
            raise ValueError(f"n={n}; must be >= 0")
        starts = rng.integers(0, 10, size=n)
        targets = rng.integers(0, 10, size=(n, self.length))
        return [(f"{s} =", " ".join(str(d) for d in t)) for s, t in zip(starts, targets)]
