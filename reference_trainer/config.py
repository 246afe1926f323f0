"""Trainer configuration: typed dataclasses, a YAML file and `a.b=value` overrides.
Unknown keys and bad values fail with one line naming the key and what is accepted."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass
class ModelConfig:
    preset: str = "llama-tiny"  # a built-in preset or a local Hugging Face checkpoint directory
    dtype: str = "float32"


@dataclass
class DataConfig:
    task: str = "digit_shift"  # a built-in task, or MODULE:CLASS for your own Task subclass (prompts + score)
    task_args: dict = field(default_factory=dict)  # passed to the task, e.g. {n_digits: 2}
    prompts_per_step: int = 16
    group_size: int = 8  # responses sampled per prompt (GRPO's group)
    seed: int = 0


@dataclass
class RolloutConfig:
    engine: str = "hf"
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    gpu_memory_utilization: float = 0.3  # vllm only
    sleep_level: int = 2  # 1: keep rollout weights off-device; 2: drop them (re-synced anyway)


@dataclass
class ActorConfig:
    lr: float = 2e-3
    weight_decay: float = 0.0
    ppo_epochs: int = 1
    mini_batch_size: int = 128  # samples per optimizer step, all ranks together
    micro_batch_size: int = 64  # samples per forward/backward on one rank
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip_c: typing.Optional[float] = None
    loss_agg: str = "token-mean"
    entropy_coef: float = 0.0
    use_kl_loss: bool = False
    # kl_to_ref each step as a metric, at the price of a reference forward pass; with false the
    # reference forward runs only when a KL term needs it (use_kl_loss or algorithm.kl_in_reward).
    kl_metric: bool = True
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "k3"
    grad_clip: float = 1.0


@dataclass
class CriticConfig:
    lr: float = 2e-3
    ppo_epochs: int = 1
    mini_batch_size: int = 128
    micro_batch_size: int = 64
    value_clip: float = 0.5
    grad_clip: float = 1.0
    warmup_steps: int = 0  # steps that train the critic only


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    gamma: float = 1.0
    lam: float = 0.95
    whiten_advantages: bool = True
    kl_in_reward: bool = False
    kl_coef: float = 0.001
    kl_type: str = "k1"


@dataclass
class ResourcesConfig:
    n_ranks: int = 2
    device: str = "auto"
    cpus_per_rank: float = 0.5
    gpus_per_rank: float = 1.0  # used when device is cuda
    threads_per_rank: int = 1
    critic_pool: str = "shared"  # shared: colocated with the actor; own: a pool of its own
    reward_pool: str = "shared"
    ray_num_cpus: int = 2  # for the embedded local cluster only


@dataclass
class OffloadConfig:
    optimizer: bool = True
    grads: bool = True
    params: bool = False
    ref: bool = False
    target: str = "auto"  # auto: host memory on GPU, files on CPU | host | file | none
    dir: str = ""  # file target directory; default <run_dir>/offload


@dataclass
class SFTConfig:
    steps: int = 0  # supervised warm start before RL (0 = off)
    lr: float = 3e-3
    batch_size: int = 64


@dataclass
class TrainerConfig:
    total_steps: int = 100
    run_dir: str = "runs/demo"
    save_every: int = 0
    resume: bool = False
    seed: int = 0
    progress: bool = True
    log_every: int = 1
    logger: list = field(default_factory=lambda: ["console", "jsonl"])  # + tensorboard, wandb (VeRL's names)


@dataclass
class TraceConfig:
    enabled: bool = False
    path: str = ""  # .json or .json.gz; default <run_dir>/trace.json.gz when enabled
    memory_hz: float = 10.0
    flush_s: float = 1.0  # how often each process ships its events to the collector
    steps: list = field(default_factory=list)  # record only these steps, e.g. [100-110, 500]
    window: int = 0  # > 0: the flight recorder keeps the last N steps, written only on a trigger
    hang_s: float = 60.0  # with window: a call this long (and 10x its median) dumps, with every stack


@dataclass
class DebugConfig:
    breakpoints: list = field(default_factory=list)  # specs such as "actor.update_actor@rank=1,step=3"
    post_mortem: bool = False
    pg_timeout_s: float = 600.0  # process-group timeout; raise it while a rank sits at a breakpoint
    listen_roles: list = field(default_factory=list)  # roles whose workers open a debugpy listener
    listen_ranks: list = field(default_factory=list)  # only these ranks listen (default: all)
    on_nonfinite: str = "stop"  # NaN/Inf in a call's tensor outputs: stop the run | warn | off


@dataclass
class ControlConfig:
    enabled: bool = True  # the control hub `rldbg top` attaches to (loopback, token-protected)
    port: int = 0  # 0 picks a free port; the URL and token go to ~/.rldbg/hub-<job>.json
    gate_timeout_s: float = 30.0  # an armed stepper whose TUI went silent resumes after this


@dataclass
class ProfileConfig:
    roles: list = field(default_factory=list)
    ranks: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    dir: str = ""  # default <run_dir>/tb


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


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


def _set(cfg, dotted: str, raw, from_text: bool) -> None:
    parts = dotted.split(".")
    node = cfg
    for i, part in enumerate(parts):
        names = {f.name: f for f in dataclasses.fields(node)}
        if part not in names:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(f"unknown config key {dotted!r}; known keys under {where}: {', '.join(names)}")
        f = names[part]
        hint = typing.get_type_hints(type(node))[part]
        if i < len(parts) - 1:
            if not dataclasses.is_dataclass(hint):
                raise ConfigError(f"config key {'.'.join(parts[:i + 1])!r} is a value, not a section")
            node = getattr(node, part)
            continue
        if dataclasses.is_dataclass(hint):
            if not isinstance(raw, dict):
                raise ConfigError(f"config section {dotted!r} needs a mapping, got {raw!r}")
            for k, v in raw.items():
                _set(cfg, f"{dotted}.{k}", v, from_text)
            return
        try:
            value = yaml.safe_load(raw) if from_text and isinstance(raw, str) else raw
        except yaml.YAMLError as e:
            raise ConfigError(f"override {dotted}={raw!r} is not a valid YAML value ({_yaml_problem(e)}); "
                              "quote strings, e.g. 'debug.breakpoints=[\"actor.update_actor@rank=1\"]'") from None
        setattr(node, f.name, _coerce(dotted, value, hint))


def _coerce(key: str, value, hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif hint is dict:
        if isinstance(value, dict):
            return value
    elif hint is list or typing.get_origin(hint) is list:
        if isinstance(value, list):
            return value
        if isinstance(value, (str, int)):
            return [value]
    name = getattr(hint, "__name__", str(hint))
    raise ConfigError(f"config key {key!r} needs a {name}, got {value!r}")


def load_config(preset: str | None = None, path: str | None = None, overrides=()) -> Config:
    """Defaults ← preset YAML ← --config YAML ← `a.b=value` overrides, then validated."""
    cfg = Config()
    if preset:
        file = PRESET_DIR / f"{preset}.yaml"
        if not file.exists():
            known = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
            raise ConfigError(f"unknown preset {preset!r}; known presets: {', '.join(known)}")
        _apply_yaml(cfg, file)
    if path:
        _apply_yaml(cfg, Path(path))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (e.g. actor.lr=1e-3)")
        key, raw = item.split("=", 1)
        _set(cfg, key.strip(), raw, from_text=True)
    validate(cfg)
    return cfg


def _apply_yaml(cfg: Config, file: Path) -> None:
    if not file.exists():
        raise ConfigError(f"config file {str(file)!r} does not exist")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(file)!r} is not valid YAML: {_yaml_problem(e)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {str(file)!r} cannot be read as text: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping of sections")
    for k, v in data.items():
        _set(cfg, k, v, from_text=False)


def _yaml_problem(e) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(e, 'problem', None) or str(e).splitlines()[0]}{where}"


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
    if p.roles or p.ranks or p.steps:
        try:
            worker_env(profile={"dir": p.dir or "tb", "roles": p.roles, "ranks": p.ranks, "steps": p.steps,
                                "run": "check"}, inherit=False)
        except ValueError as e:
            raise ConfigError(f"profile: {e}") from None


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
        if parse_steps(cfg.trace.steps) and cfg.trace.window:
            raise ConfigError(f"config keys 'trace.window'={cfg.trace.window} and 'trace.steps'={cfg.trace.steps}: "
                              "choose one (the flight recorder keeps the last steps, step windows chosen ones)")
    except ValueError as e:
        raise ConfigError(f"config key 'trace.steps': {e}") from None
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


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)
