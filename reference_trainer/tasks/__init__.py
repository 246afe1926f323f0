"""Verifiable synthetic tasks, the in-code tokenizer and tiny model configs for the reference trainer."""

from . import count_up, digit_shift  # noqa: F401  (importing registers the tasks)
from .base import TASKS, Task, get_task, register_task
from .models import PRESETS, build_causal_lm, build_value_model, count_params, value_forward
from .tokenizer import build_tokenizer, load_tokenizer

__all__ = [
    "TASKS", "Task", "get_task", "register_task",
    "PRESETS", "build_causal_lm", "build_value_model", "count_params", "value_forward",
    "build_tokenizer", "load_tokenizer",
]
