"""The reference trainer's demo, one step at a time, for benches that interleave it with something
else (TRL's steps, traced and untraced blocks): fit()'s set-up (worker groups, models, the SFT warm
start, the prompt source) without its loop, tracing, control hub or metrics log.

    with DemoSteps(cfg) as run:
        record = run.step()     # fit()'s per-step record: "tokens", "time/step", ...

Ray must already be up (reference_trainer.runtime.start_ray); the groups are shut down on exit.
"""
from __future__ import annotations

from reference_trainer.config import Config
from reference_trainer.data import PromptSource
from reference_trainer.roles import build_role_groups
from reference_trainer.single_controller import shutdown_groups
from reference_trainer.tasks import get_task
from reference_trainer.trainer import train_step, warm_start, worker_env
from reference_trainer.workers.hybrid import load_tokenizer_for


class DemoSteps:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.groups: dict = {}
        self.n = 0

    def __enter__(self) -> "DemoSteps":
        cfg = self.cfg
        try:
            self.groups = build_role_groups(cfg, worker_env(cfg))
            for g in self.groups.values():
                g.init_model()
            task, tokenizer = get_task(cfg.data.task, **cfg.data.task_args), load_tokenizer_for(cfg.model.preset)
            if cfg.sft.steps:
                warm_start(self.groups["actor"], task, tokenizer, cfg)   # as fit() does: same responses
            self.prompts = PromptSource(task, tokenizer, cfg.data.prompts_per_step, cfg.data.group_size,
                                        cfg.data.seed)
        except BaseException:
            self.__exit__()
            raise
        return self

    def step(self) -> dict:
        g = self.groups
        record = train_step(self.n, self.prompts.batch(self.n), g["actor"], g.get("critic"), g["reward"], self.cfg)
        self.n += 1
        return record

    def __exit__(self, *exc) -> None:
        shutdown_groups(self.groups.values())
        self.groups = {}
