"""The reference trainer's worker groups at test size (demo preset, 4 prompts x 4 samples, no
trace, no warm start), for tests that drive train steps against a live hub or TUI."""
from __future__ import annotations

import contextlib

from reference_trainer.config import load_config
from reference_trainer.data import PromptSource
from reference_trainer.roles import build_role_groups
from reference_trainer.single_controller import shutdown_groups
from reference_trainer.tasks import build_tokenizer, get_task


@contextlib.contextmanager
def small_trainer(run_dir):
    """Yields (cfg, groups, prompt source); the groups are shut down on exit."""
    cfg = load_config("demo", overrides=[f"trainer.run_dir={run_dir}", "trace.enabled=false",
                                         "sft.steps=0", "trainer.progress=false", "data.prompts_per_step=4",
                                         "data.group_size=4", "actor.mini_batch_size=16", "critic.mini_batch_size=16",
                                         "actor.micro_batch_size=8", "critic.micro_batch_size=8"])
    groups = build_role_groups(cfg)
    try:
        for g in groups.values():
            g.init_model()
        src = PromptSource(get_task(cfg.data.task), build_tokenizer(), cfg.data.prompts_per_step,
                           cfg.data.group_size, 0)
        yield cfg, groups, src
    finally:
        shutdown_groups(groups.values())
