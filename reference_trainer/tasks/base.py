"""The Task interface (prompts with ground truth, a rule-based score) and the task registry."""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod

import numpy as np


class Task(ABC):
    """A verifiable task: prompts come with a ground truth, and a rule scores any response in [0, 1]."""

    name: str = ""

    @abstractmethod
    def make_prompts(self, n: int, rng: np.random.Generator) -> list[tuple[str, object]]:
        """n (prompt text, ground truth) pairs; the same rng state gives the same prompts."""

    @abstractmethod
    def score(self, response_text: str, ground_truth) -> float:
        """Reward in [0, 1] for a decoded response (partial credit allowed)."""

    def sft_examples(self, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
        """(prompt, target completion) pairs for an optional supervised warm start; the trainer
        appends <eos> to the target. Tasks without a warm start return []."""
        return []


TASKS: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    if not cls.name:
        raise ValueError(f"task class {cls.__name__} has no name")
    TASKS[cls.name] = cls
    return cls


TASK_FORM = "a built-in task ({known}) or MODULE:CLASS, a Task subclass importable on the driver and every worker"


def get_task(name: str, **params) -> Task:
    """Build a task; params go to its constructor (e.g. get_task("digit_shift", n_digits=4)).
    `name` is a built-in task or "package.module:ClassName", the user's own Task subclass (its
    prompts and its score), imported where the task is used: the driver and the reward workers."""
    cls = TASKS.get(name) or _import_task(name)
    accepted = [p for p in inspect.signature(cls).parameters]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for task {name!r}; accepted: {accepted}")
    return cls(**params)


def _import_task(name: str) -> type[Task]:
    form = TASK_FORM.format(known=", ".join(sorted(TASKS)))
    module_name, colon, attr = str(name).partition(":")
    if not colon or not module_name or not attr:
        raise ValueError(f"unknown task {name!r}; accepted: {form}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"task {name!r}: cannot import {module_name!r} ({e}); accepted: {form}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        what = "nothing" if cls is None else type(cls).__name__
        raise ValueError(f"task {name!r}: {module_name}.{attr} is {what}, not a Task subclass; accepted: {form}")
    return cls


def response_tokens(response_text: str) -> list[str]:
    """Words of a response up to the first <eos>, without padding/bos — whether or not the caller
    decoded with skip_special_tokens."""
    text = response_text.split("<eos>", 1)[0]
    return [w for w in text.split() if w not in ("<pad>", "<bos>")]
