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
    task: str = "digit_shift"
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


@dataclass
class DebugConfig:
    breakpoints: list = field(default_factory=list)  # specs such as "actor.update_actor@rank=1,step=3"
    post_mortem: bool = False
    pg_timeout_s: float = 600.0  # process-group timeout; raise it while a rank sits at a breakpoint
    listen_roles: list = field(default_factory=list)  # roles whose workers open a debugpy listener
    listen_ranks: list = field(default_factory=list)  # only these ranks listen (default: all)


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
        value = yaml.safe_load(raw) if from_text and isinstance(raw, str) else raw
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
    data = yaml.safe_load(file.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping of sections")
    for k, v in data.items():
        _set(cfg, k, v, from_text=False)


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
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"config key 'rollout.top_p' must be in (0, 1], got {cfg.rollout.top_p}")
    from reference_trainer.metrics_log import LOGGERS
    bad = [n for n in cfg.trainer.logger if n not in LOGGERS]
    if bad:
        raise ConfigError(f"config key 'trainer.logger' has {bad}; accepted: {', '.join(LOGGERS)}")
    if cfg.rollout.temperature <= 0:
        raise ConfigError(f"config key 'rollout.temperature' must be > 0, got {cfg.rollout.temperature}")


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)
