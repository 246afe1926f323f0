"""A bad key=value on the trainer's command line is refused in one line that names the key, the
value given and what the key takes, before Ray or a model starts (exit 2)."""
from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("override, expected", [
    ("trainer.total_steps=abc", "config error: config key 'trainer.total_steps' needs an integer, got 'abc'"),
    ("actor.lr=fast", "config error: config key 'actor.lr' needs a number, got 'fast'"),
    ("trace.enabled=maybe", "config error: config key 'trace.enabled' needs true or false, got 'maybe'"),
    ("trace.window=-3", "config error: config key 'trace.window' must be ≥ 0, got -3"),
    ("nosuch.key=1", "config error: unknown config key 'nosuch.key'; known keys under the top level: "),
    # nan passes every `value <= 0` bound; both failed inside the workers after Ray started
    ("actor.lr=nan", "config error: config key 'actor.lr' needs a finite number, got 'nan'"),
    ("rollout.temperature=inf", "config error: config key 'rollout.temperature' needs a finite number, got 'inf'"),
    # known on the driver, not in a worker's init_model after Ray started
    ("model.preset=nope", "config error: config key 'model.preset' is 'nope'; accepted: "),
    ("model.preset=/", "config error: config key 'model.preset' is the folder '/', which holds no config.json"),
    # settings that would do nothing, silently
    ("trace.enabled=false trace.window=3", "config error: config key 'trace.window'=3 shapes a trace, but "
                                           "trace.enabled=false: add trace.enabled=true"),
    ("trainer.total_steps=5 trace.steps=[100]", "config error: config key 'trace.steps'=[100] names no step of "
                                                "this run: trainer.total_steps=5 runs steps 0-4"),
    # a profile key's error names the key, not the worker switch it becomes
    ("profile.ranks=[-1]", "config error: config key 'profile.ranks': bad ranks value '-1': expected non-negative "
                           "rank numbers"),
    # -1 is an integer: what is refused is a step before the first one
    ("profile.steps=[-1]", "config error: config key 'profile.steps': bad steps value '-1': expected non-negative "
                           "step numbers or ranges first-last with first <= last"),
    ("profile.steps=[1] profile.dir=a;b", "config error: config key 'profile.dir' is 'a;b'; accepted: a folder path "
                                          "without ';'"),
    ("profile.dir=/tmp/p", "config error: config key 'profile.dir'='/tmp/p' says where torch.profiler writes, but no "
                           "call is selected: add profile.roles, "),
    ("profile.methods=[update]", "config error: config key 'profile.methods' names 'update', not a registered method "
                                 "of this run's roles; accepted: compute_log_prob, "),
    ("trainer.total_steps=5 profile.steps=[50]", "config error: config key 'profile.steps'=[50] names no step of "
                                                 "this run: trainer.total_steps=5 runs steps 0-4"),
])
def test_a_bad_override_is_one_line_before_any_work(override, expected, tmp_path):
    out = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", *override.split(),
                          f"trainer.run_dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), out.stderr
    assert "Ray" not in out.stdout + out.stderr and not any(tmp_path.iterdir())


@pytest.mark.parametrize("text, expected", [
    ("actor:\n  lr: 1.0e-3\n  clip_ratio: 0.2\n  lr: 5.0e-4\n", "key 'lr' appears twice in one mapping (first at line 2)"
                                                               " at line 4, column 3"),
    ("actor:\n  lr: 1.0e-3\ntrainer:\n  total_steps: 3\nactor:\n  clip_ratio: 0.3\n",
     "key 'actor' appears twice in one mapping (first at line 1) at line 5, column 1"),
])
def test_a_key_given_twice_in_a_config_file_is_refused(text, expected, tmp_path):
    """Plain YAML keeps the last of two equal keys: the first value (a whole section, in the second
    case) would be dropped without a word."""
    config = tmp_path / "dup.yaml"
    config.write_text(text)
    out = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", "--config", str(config),
                          f"trainer.run_dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"config error: config file {str(config)!r} is not valid YAML: {expected}"


def test_on_off_words_are_strings_where_a_key_takes_a_string(tmp_path):
    """YAML 1.1 reads an unquoted off/on/yes/no as a boolean: `debug.on_nonfinite=off`, as the README
    writes it, is the string on the command line; in a file, where the text is gone, one line says to
    quote it. A comma-separated trace.steps is read as the README writes it too."""
    from reference_trainer.config import load_config
    cfg = load_config("demo", overrides=["debug.on_nonfinite=off", "trace.steps=100-110,500"])
    assert cfg.debug.on_nonfinite == "off"
    from rldbg import parse_steps
    assert parse_steps(cfg.trace.steps) == ((100, 110), (500, 500))
    config = tmp_path / "off.yaml"
    config.write_text("debug:\n  on_nonfinite: off\n")
    out = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", "--config", str(config),
                          f"trainer.run_dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == (
        "config error: config key 'debug.on_nonfinite' needs a string, got false (YAML reads an unquoted "
        "on/off/yes/no/true/false as true or false: quote it, e.g. 'off')"), out.stderr


def test_a_profile_dir_where_no_folder_can_be_made_is_refused_before_any_work(tmp_path):
    """Made by the first profiled call inside a worker, mid-run, it failed there with a Ray traceback."""
    out = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", "profile.dir=/proc/nope",
                          "profile.steps=[1]", f"trainer.run_dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == (
        "config error: config key 'profile.dir' is '/proc/nope', where no folder can be made "
        "(No such file or directory)"), out.stderr


def test_profile_methods_reach_the_workers_switch():
    from reference_trainer.config import load_config
    from reference_trainer.trainer import worker_env

    cfg = load_config("demo", overrides=["profile.methods=[update_actor]", "profile.steps=[3]"])
    spec = worker_env(cfg)["RLDBG_PROFILE"]
    assert "methods=update_actor" in spec.split(";") and "steps=3" in spec.split(";"), spec
