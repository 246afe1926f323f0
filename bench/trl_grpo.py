"""The demo's GRPO step through TRL's GRPOTrainer, for bench_trainer.py's throughput comparison.

Same model (llama-tiny, seed 0), tokenizer, digit_shift prompts (one step = the 16 prompts
PromptSource gives for that step), rule-based score, batch shape and optimiser settings as
reference_trainer's demo preset. Needs TRL (installed only in /tmp/trlvenv); importing this module
without it raises ImportError, which bench_trainer.py reports as "TRL not available".

Differences we cannot remove, printed by the bench: TRL runs in this one process (no Ray), loads
no reference model when beta=0 (ours runs its reference forward only with --ref-forward ours), and keeps its
optimizer state in memory (ours moves it out to a file every step on CPU, per the demo preset).
"""
from __future__ import annotations

import tempfile
import time

import numpy as np
import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from reference_trainer.tasks import build_causal_lm, build_tokenizer, get_task


class StepClock(TrainerCallback):
    """Wall time and token count of each optimizer step (= one generation batch here, since
    gradient_accumulation_steps=1 and steps_per_generation=1)."""

    def __init__(self, batch: int, between=None):
        self.batch, self.between = batch, between
        self.seconds: list[float] = []
        self.tokens: list[int] = []  # prompt + completion tokens (mask 1), from TRL's num_input_tokens_seen
        self.completion_tokens: list[float] = []  # up to and incl. <eos>, as TRL counts them
        self.rewards: list[float] = []
        self._t0 = self._seen = None

    def on_step_begin(self, args, state, control, **kw):
        self._t0, self._seen = time.perf_counter(), state.num_input_tokens_seen

    def on_step_end(self, args, state, control, **kw):
        self.seconds.append(time.perf_counter() - self._t0)
        self.tokens.append(int(state.num_input_tokens_seen - self._seen))
        if self.between is not None:
            self.between(self)   # outside this step's clock: the next starts after it

    def on_log(self, args, state, control, logs=None, **kw):
        # logging_steps=1: each log holds one step's means (the final summary log has neither key)
        if logs and "reward" in logs:
            self.rewards.append(float(logs["reward"]))
            self.completion_tokens.append(float(logs["completions/mean_length"]) * self.batch)


_SCRATCH = tempfile.TemporaryDirectory(prefix="rldbg-bench-trl-")   # TRL's output dirs, removed at exit


def demo_dataset(task, n_steps: int, prompts_per_step: int, seed: int) -> Dataset:
    """Rows in step order, drawn exactly as reference_trainer.data.PromptSource draws them;
    with shuffle_dataset=False TRL's sampler takes them in that order, prompts_per_step at a time."""
    prompts, truths = [], []
    for step in range(n_steps):
        for prompt, truth in task.make_prompts(prompts_per_step, np.random.default_rng([seed, step])):
            prompts.append(prompt)
            truths.append(truth)
    return Dataset.from_dict({"prompt": prompts, "ground_truth": truths})


def run_trl_grpo(cfg, steps: int, threads: int, between=None) -> StepClock:
    """`cfg` is the reference_trainer Config of the run we compare with (the demo preset);
    `between(clock)` runs after each TRL step, off its clock (the bench runs our steps there)."""
    torch.set_num_threads(threads)
    task, tokenizer = get_task(cfg.data.task, **cfg.data.task_args), build_tokenizer()
    model = build_causal_lm(cfg.model.preset, len(tokenizer), seed=cfg.trainer.seed)

    def digit_shift_reward(completions, ground_truth, **_):
        # TRL decodes with skip_special_tokens=True; score() accepts text with or without <eos>.
        return [task.score(c, gt) for c, gt in zip(completions, ground_truth)]

    batch = cfg.data.prompts_per_step * cfg.data.group_size
    a = cfg.actor
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(dir=_SCRATCH.name),
        use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        logging_steps=1, max_steps=steps, seed=cfg.trainer.seed, dataloader_pin_memory=False,
        # One generation batch of prompts_per_step × group_size completions = one optimizer step,
        # as in our preset (mini_batch_size == batch, ppo_epochs 1).
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, num_generations=cfg.data.group_size,
        num_iterations=a.ppo_epochs, shuffle_dataset=False,
        max_completion_length=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p, top_k=0,
        # Optimiser: AdamW, constant lr, no warmup, same clip; loss: token-mean over the batch ("dapo"),
        # asymmetric clip 0.2/0.28, advantages scaled by the group's std, no KL term (use_kl_loss false).
        learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=a.weight_decay,
        max_grad_norm=a.grad_clip, optim="adamw_torch",
        loss_type="dapo", epsilon=a.clip_low, epsilon_high=a.clip_high, scale_rewards="group", beta=0.0,
    )
    clock = StepClock(batch, between)
    trainer = GRPOTrainer(
        model=model, reward_funcs=digit_shift_reward, args=args, processing_class=tokenizer,
        train_dataset=demo_dataset(task, steps, cfg.data.prompts_per_step, cfg.data.seed), callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; the bench prints its own summary
    trainer.train()
    return clock
