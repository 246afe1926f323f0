"""What a trainer configuration must satisfy: choices and bounds of single keys, how keys relate
(batch sizes, ranks, trace and debug switches), and whether the run fits a cluster. Each failure
is one ConfigError line naming the key and what is accepted; reference_trainer.config runs
validate() once a config is loaded, before any work starts."""
from __future__ import annotations

import re
import typing
from pathlib import Path

if typing.TYPE_CHECKING:
    from reference_trainer.config import Config


class ConfigError(ValueError):
    pass


CHOICES = {
    "model.dtype": ("float32", "bfloat16", "float16"),
    "rollout.engine": ("hf", "vllm"),
    "rollout.sleep_level": (1, 2),
    "actor.loss_agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    "actor.kl_loss_type": ("k1", "k2", "k3", "low_var_kl", "abs"),
    "algorithm.adv_estimator": ("grpo", "gae"),
    "algorithm.kl_type": ("k1", "k2", "k3", "low_var_kl", "abs"),
    "resources.device": ("auto", "cpu", "cuda"),
    "resources.critic_pool": ("shared", "own"),
    "resources.reward_pool": ("shared", "own"),
    "offload.target": ("auto", "host", "file", "none"),
    "debug.on_nonfinite": ("stop", "warn", "off"),
}


# key -> (lowest accepted, whether it is accepted itself); checked after the type coercion.
BOUNDS = {
    "trainer.total_steps": (1, True), "trainer.save_every": (0, True), "trainer.log_every": (1, True),
    "sft.steps": (0, True), "sft.batch_size": (1, True), "sft.lr": (0, False),
    "critic.warmup_steps": (0, True), "actor.weight_decay": (0, True), "actor.entropy_coef": (0, True),
    "actor.clip_low": (0, True), "actor.clip_high": (0, True), "actor.grad_clip": (0, False),
    "critic.grad_clip": (0, False), "critic.value_clip": (0, False),
    "resources.cpus_per_rank": (0, True), "resources.gpus_per_rank": (0, True),
    "resources.threads_per_rank": (1, True), "resources.ray_num_cpus": (1, True),
    "trace.memory_hz": (0, True), "trace.flush_s": (0, False), "debug.pg_timeout_s": (0, False),
    "trace.window": (0, True), "trace.hang_s": (0, False),
    "control.port": (0, True), "control.gate_timeout_s": (0, False),
    "algorithm.gamma": (0, True), "algorithm.lam": (0, True), "data.seed": (0, True),
}


def _get(cfg, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def roles_of(cfg: Config) -> list[str]:
    """The roles this config runs (breakpoint, listen and profile specs may only name these)."""
    return ["actor", "reward"] + (["critic"] if cfg.algorithm.adv_estimator == "gae" else [])


def required_resources(cfg: Config) -> dict:
    """CPU/GPU the run's placement groups reserve, all pools together (GPU only on cuda)."""
    r = cfg.resources
    pools = 1 + (r.critic_pool == "own" and cfg.algorithm.adv_estimator == "gae") + (r.reward_pool == "own")
    gpu_pools = 1 + (r.critic_pool == "own" and cfg.algorithm.adv_estimator == "gae")
    return {"CPU": pools * r.n_ranks * r.cpus_per_rank, "GPU": gpu_pools * r.n_ranks * r.gpus_per_rank}


def check_fits(cfg: Config, cluster: dict, where: str) -> None:
    """ConfigError (one line) when the run can never be placed on `cluster`'s total resources:
    asked before anything waits for a placement group."""
    need = required_resources(cfg)
    r = cfg.resources
    uses_gpu = r.device == "cuda" or (r.device == "auto" and cluster.get("GPU", 0) > 0)
    if uses_gpu and r.n_ranks > 1 and r.gpus_per_rank < 1:
        # Ray packs fractional GPUs onto one device, and NCCL refuses two ranks of a group on one
        # GPU ("Duplicate GPU detected") only after every rank has built its model: say it now.
        raise ConfigError(
            f"resources.gpus_per_rank={r.gpus_per_rank:g} with resources.n_ranks={r.n_ranks} lets Ray put two "
            f"ranks on one GPU, and NCCL refuses ranks of one group that share a GPU; set "
            f"resources.gpus_per_rank=1 (a GPU per rank) or resources.n_ranks=1")
    for kind in ("CPU", "GPU") if uses_gpu else ("CPU",):
        have = float(cluster.get(kind, 0))
        if need[kind] > have + 1e-9:
            per = r.cpus_per_rank if kind == "CPU" else r.gpus_per_rank
            key = "cpus_per_rank" if kind == "CPU" else "gpus_per_rank"
            raise ConfigError(
                f"resources.n_ranks={r.n_ranks} × resources.{key}={per:g} needs {need[kind]:g} {kind} "
                f"but {where} has {have:g}; lower resources.n_ranks or resources.{key}"
                + (", or raise resources.ray_num_cpus" if kind == "CPU" and "embedded" in where else ""))


def _check_debug(cfg: Config) -> None:
    """Breakpoint, listen and profile specs fail here, on the driver, before any worker starts."""
    from rldbg import parse_breakpoint, parse_ranks, switches, worker_env

    roles = roles_of(cfg)
    methods = _known_methods(cfg) if cfg.debug.breakpoints else None
    for item in cfg.debug.breakpoints:
        try:
            parse_breakpoint(str(item), known_roles=roles, known_methods=methods)
        except ValueError as e:
            raise ConfigError(f"debug.breakpoints: {e}") from None
    import os
    env = os.environ.get(switches.BREAKPOINTS, "")   # passed on to every worker (see worker_env)
    for item in filter(str.strip, env.split(";")):
        try:
            parse_breakpoint(item, known_roles=roles, known_methods=methods or _known_methods(cfg))
        except ValueError as e:
            raise ConfigError(f"${switches.BREAKPOINTS}: {e}") from None
    try:
        parse_ranks(os.environ.get(switches.LISTEN_RANKS) or None, f"${switches.LISTEN_RANKS}")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for key in ("debug.listen_roles", "profile.roles"):
        for role in _get(cfg, key):
            if str(role) != "*" and str(role) not in roles:
                raise ConfigError(f"config key {key!r} names role {role!r}; this run's roles: {', '.join(roles)}"
                                  + (" or *" if key == "debug.listen_roles" else ""))
    try:
        parse_ranks(",".join(map(str, cfg.debug.listen_ranks)) or None, "debug.listen_ranks")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for key in ("debug.listen_ranks", "profile.ranks"):
        bad = [x for x in _get(cfg, key) if str(x).isdigit() and int(x) >= cfg.resources.n_ranks]
        if bad:
            raise ConfigError(f"config key {key!r} names rank {bad[0]} but resources.n_ranks={cfg.resources.n_ranks} "
                              f"(ranks 0-{cfg.resources.n_ranks - 1})")
    p = cfg.profile
    if p.dir and not p.on:
        raise ConfigError(f"config key 'profile.dir'={p.dir!r} says where torch.profiler writes, but no call is "
                          "selected: add profile.roles, profile.ranks, profile.steps or profile.methods")
    if ";" in p.dir:   # the workers' switch separates its items with ';'
        raise ConfigError(f"config key 'profile.dir' is {p.dir!r}; accepted: a folder path without ';'")
    if p.on:
        for key in ("roles", "ranks", "steps", "methods"):   # one at a time: the error names its key
            try:
                worker_env(profile={"dir": p.dir or "tb", "run": "check", key: getattr(p, key)}, inherit=False)
            except ValueError as e:
                said = re.sub(r"^\$?RLDBG_PROFILE: ", "", str(e))   # the switch it becomes: not what the user wrote
                raise ConfigError(f"config key 'profile.{key}': {said}") from None
        known = _known_methods(cfg) if p.methods else None
        if unknown := [m for m in map(str, p.methods) if known and m not in known]:
            raise ConfigError(f"config key 'profile.methods' names {unknown[0]!r}, not a registered method of this "
                              f"run's roles; accepted: {', '.join(known)}")
        where = p.dir or str(Path(cfg.trainer.run_dir) / "tb")
        try:   # made now, not by the first profiled call inside a worker, mid-run
            Path(where).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"config key 'profile.dir' is {where!r}, where no folder can be made "
                              f"({e.strerror})") from None


def _known_methods(cfg: Config) -> list[str] | None:
    try:
        from reference_trainer.single_controller.decorator import registered_methods
        from reference_trainer.workers.critic import CriticWorker
        from reference_trainer.workers.hybrid import ActorRolloutRefWorker
        from reference_trainer.workers.reward import RewardWorker
    except Exception:
        return None   # cannot import the workers here: roles are still checked
    classes = {"actor": ActorRolloutRefWorker, "critic": CriticWorker, "reward": RewardWorker}
    return sorted({m for role in roles_of(cfg) for m in registered_methods(classes[role])})


def _check_model(preset: str) -> None:
    """A preset name or a Hugging Face checkpoint folder, known here and not in a worker after Ray started."""
    if Path(preset).is_dir():
        if not (Path(preset) / "config.json").is_file():
            raise ConfigError(f"config key 'model.preset' is the folder {preset!r}, which holds no config.json; "
                              "accepted: a preset name or a Hugging Face checkpoint folder")
        return
    from reference_trainer.tasks.models import PRESETS   # torch and transformers: the run needs them anyway
    if preset not in PRESETS:
        raise ConfigError(f"config key 'model.preset' is {preset!r}; accepted: {', '.join(sorted(PRESETS))}, "
                          "or a Hugging Face checkpoint folder")


def _profile_steps(cfg) -> tuple:
    """The profiled steps as ranges ((a, b), ...); () for every step (or a spec checked elsewhere)."""
    from rldbg import parse_steps
    try:
        return parse_steps([str(s) for s in cfg.profile.steps])
    except ValueError:
        return ()


def validate(cfg: Config) -> None:
    for key, accepted in CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in accepted:
            raise ConfigError(f"config key {key!r} is {value!r}; accepted: {', '.join(map(str, accepted))}")
    positive = ["data.prompts_per_step", "data.group_size", "rollout.max_new_tokens", "actor.mini_batch_size",
                "actor.micro_batch_size", "critic.mini_batch_size", "critic.micro_batch_size",
                "resources.n_ranks", "actor.ppo_epochs", "critic.ppo_epochs", "actor.lr", "critic.lr"]
    for key in positive:
        section, name = key.split(".")
        if getattr(getattr(cfg, section), name) <= 0:
            raise ConfigError(f"config key {key!r} must be > 0, got {getattr(getattr(cfg, section), name)!r}")
    _check_model(cfg.model.preset)
    if cfg.algorithm.adv_estimator == "grpo" and cfg.data.group_size < 2:
        raise ConfigError(f"GRPO compares responses within a group; data.group_size={cfg.data.group_size} must be ≥ 2 "
                          "(or set algorithm.adv_estimator=gae)")
    batch = cfg.data.prompts_per_step * cfg.data.group_size
    n = cfg.resources.n_ranks
    roles = ("actor", "critic") if cfg.algorithm.adv_estimator == "gae" else ("actor",)  # GRPO has no critic
    for role in roles:
        sec = getattr(cfg, role)
        if batch % sec.mini_batch_size:
            raise ConfigError(
                f"{role}.mini_batch_size={sec.mini_batch_size} must divide the step's batch "
                f"data.prompts_per_step × data.group_size = {batch}"
            )
        if sec.mini_batch_size < n:
            raise ConfigError(
                f"{role}.mini_batch_size={sec.mini_batch_size} is smaller than resources.n_ranks={n}: "
                f"some ranks would get no sample; raise {role}.mini_batch_size or lower resources.n_ranks"
            )
    for role in roles:
        sec = getattr(cfg, role)
        if sec.micro_batch_size > sec.mini_batch_size:
            raise ConfigError(f"{role}.micro_batch_size={sec.micro_batch_size} is larger than "
                              f"{role}.mini_batch_size={sec.mini_batch_size}; it must be ≤ the mini-batch")
    for key, (low, inclusive) in BOUNDS.items():
        value = _get(cfg, key)
        if value < low or (value == low and not inclusive):
            raise ConfigError(f"config key {key!r} must be {'≥' if inclusive else '>'} {low}, got {value!r}")
    if cfg.control.port > 65535:
        raise ConfigError(f"config key 'control.port' must be in 0..65535 (0 picks a free port), got {cfg.control.port}")
    for key in ("algorithm.gamma", "algorithm.lam", "rollout.gpu_memory_utilization"):
        if not 0 <= _get(cfg, key) <= 1:
            raise ConfigError(f"config key {key!r} must be in [0, 1], got {_get(cfg, key)!r}")
    from rldbg import parse_steps
    try:
        steps = parse_steps(cfg.trace.steps)
    except ValueError as e:
        raise ConfigError(f"config key 'trace.steps': {e}") from None
    if steps and cfg.trace.window:
        raise ConfigError(f"config keys 'trace.window'={cfg.trace.window} and 'trace.steps'={cfg.trace.steps}: "
                          "choose one (the flight recorder keeps the last steps, step windows chosen ones)")
    # Settings that would do nothing, silently: a trace's shape without a trace, steps the run never reaches.
    shaped = [k for k in ("window", "steps", "hang_s") if getattr(cfg.trace, k) != getattr(type(cfg.trace)(), k)]
    if shaped and not (cfg.trace.enabled or cfg.trace.path):   # as trainer._start_tracing decides
        raise ConfigError(f"config key 'trace.{shaped[0]}'={getattr(cfg.trace, shaped[0])} shapes a trace, but "
                          "trace.enabled=false: add trace.enabled=true")
    for key, ranges in (("trace.steps", steps), ("profile.steps", _profile_steps(cfg))):
        if ranges and min(a for a, _ in ranges) >= cfg.trainer.total_steps:
            raise ConfigError(f"config key {key!r}={_get(cfg, key)} names no step of this run: trainer.total_steps="
                              f"{cfg.trainer.total_steps} runs steps 0-{cfg.trainer.total_steps - 1}")
    if cfg.trace.path and not cfg.trace.path.endswith((".json", ".json.gz")):
        raise ConfigError(f"config key 'trace.path' is {cfg.trace.path!r}; it must end in .json or .json.gz")
    import os
    import sys
    # The embedded cluster's size is known now. Not when this process already runs Ray (fit() then
    # uses that cluster, checked against its real resources in trainer._check_cluster).
    ray_up = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    if os.environ.get("RAY_ADDRESS", "local") == "local" and not ray_up:
        check_fits(cfg, {"CPU": cfg.resources.ray_num_cpus, "GPU": float("inf")}, f"the embedded cluster (resources.ray_num_cpus="
                                                             f"{cfg.resources.ray_num_cpus})")
    _check_debug(cfg)
    if cfg.trace.enabled or cfg.trace.path:
        from rldbg import check_trace_path
        try:
            check_trace_path(cfg.trace.path or str(Path(cfg.trainer.run_dir) / "trace.json.gz"))
        except RuntimeError as e:
            raise ConfigError(str(e)) from None
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"config key 'rollout.top_p' must be in (0, 1], got {cfg.rollout.top_p}")
    from reference_trainer.metrics_log import LOGGERS
    bad = [n for n in cfg.trainer.logger if n not in LOGGERS]
    if bad:
        raise ConfigError(f"config key 'trainer.logger' has {bad}; accepted: {', '.join(LOGGERS)}")
    if cfg.rollout.temperature <= 0:
        raise ConfigError(f"config key 'rollout.temperature' must be > 0, got {cfg.rollout.temperature}")
    from reference_trainer.tasks import get_task
    try:
        get_task(cfg.data.task, **cfg.data.task_args)   # here, not first on a worker mid-start-up
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config key 'data.task': {e}") from None
