"""Trainer configuration: typed dataclasses, a YAML file and `a.b=value` overrides.
Unknown keys and bad values fail with one line naming the key and what is accepted."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from reference_trainer.config_checks import ConfigError, validate

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
    progress: bool = True   # a progress bar where stderr is a terminal; plain lines into a log file
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
    methods: list = field(default_factory=list)   # registered method names; empty: every method
    dir: str = ""  # default <run_dir>/tb

    @property
    def on(self) -> bool:
        """Any selection key set: torch.profiler runs around the calls it selects."""
        return bool(self.roles or self.ranks or self.steps or self.methods)


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
        if from_text and isinstance(value, bool) and str in (hint, *typing.get_args(hint)):
            value = raw.strip()   # YAML 1.1 reads on/off/yes/no as booleans: a string key takes the text given
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
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
            with contextlib.suppress(ValueError):
                number = float(value)
        if number is not None and math.isfinite(number):   # nan passes every bound check below
            return number
        if number is not None:
            raise ConfigError(f"config key {key!r} needs a finite number, got {value!r}")
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, bool):   # from a file, where the text is gone
            raise ConfigError(f"config key {key!r} needs a string, got {str(value).lower()} (YAML reads an unquoted "
                              "on/off/yes/no/true/false as true or false: quote it, e.g. 'off')")
    elif hint is dict:
        if isinstance(value, dict):
            return value
    elif hint is list or typing.get_origin(hint) is list:
        if isinstance(value, list):
            return value
        if isinstance(value, (str, int)):
            return [value]
    name = _KINDS.get(hint) or _KINDS.get(typing.get_origin(hint)) or f"a {getattr(hint, '__name__', hint)}"
    raise ConfigError(f"config key {key!r} needs {name}, got {value!r}")


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping",
          list: "a list"}


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
        data = yaml.load(file.read_text(), Loader=_UniqueKeys) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(file)!r} is not valid YAML: {_yaml_problem(e)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {str(file)!r} cannot be read as text: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping of sections")
    for k, v in data.items():
        _set(cfg, k, v, from_text=False)


class _UniqueKeys(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping: plain YAML keeps the last, and a
    setting written twice in a config file would silently lose one of its values."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first at line {seen[key] + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _yaml_problem(e) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(e, 'problem', None) or str(e).splitlines()[0]}{where}"


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)
