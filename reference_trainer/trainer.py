"""fit(): the PPO / GRPO step as a readable script. Every transition of the hybrid engine is
a visible line: the driver is the single controller, each call runs on all ranks."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import numpy as np

import rldbg
from rldbg import instrument

from reference_trainer import checkpoint, run_lock
from reference_trainer.advantage import compute_advantages
from reference_trainer.config import Config, to_dict
from reference_trainer.data import PromptSource, sft_batch
from reference_trainer.metrics_log import MetricsLog, PhaseTimer
from reference_trainer.protocol import reduce_metrics
from reference_trainer.roles import build_role_groups
from reference_trainer.runtime import lost_peer, start_ray, stop_ray
from reference_trainer.single_controller import shutdown_groups
from reference_trainer.single_controller.host import RemoteCallError
from reference_trainer.stop import Stopped, stop_on_signals
from reference_trainer.stop import check as check_stop
from reference_trainer.stop import job_stop_notice
from reference_trainer.tasks import get_task
from reference_trainer.workers.hybrid import load_tokenizer_for


def fit(cfg: Config) -> list[dict]:
    """Train; returns the per-step metric records (also in <run_dir>/metrics.jsonl).
    SIGTERM/SIGINT raise stop.Stopped (with .step and .trace) after the cleanup below has run."""
    with run_lock.hold(cfg.trainer.run_dir):   # before Ray starts: a second run into the folder stops here
        return _fit(cfg)


def _fit(cfg: Config) -> list[dict]:
    try:
        started = start_ray(cfg.resources.ray_num_cpus)
    except SystemExit as e:   # a SIGTERM while Ray starts: its handler exits with the signal's number
        if e.code == signal.SIGTERM:
            raise Stopped(signal.SIGTERM) from None
        raise
    with stop_on_signals() as guard:
        trace_path, spill, control, groups, history, step = None, None, False, {}, [], None
        try:
            _check_cluster(cfg, started)
            trace_path, spill = _start_tracing(cfg)
            if trace_path and (notice := job_stop_notice()):
                print(notice, flush=True)
            control = _start_control(cfg)
            rldbg.configure_nonfinite(cfg.debug.on_nonfinite, failures_dir(cfg))   # the driver's check of merged results
            groups = build_role_groups(cfg, worker_env(cfg))
            actor, critic, reward = groups["actor"], groups.get("critic"), groups["reward"]
            actor.init_model()
            reward.init_model()
            if critic:
                critic.init_model()
            task, tokenizer = get_task(cfg.data.task, **cfg.data.task_args), load_tokenizer_for(cfg.model.preset)
            start = checkpoint.resume(cfg.trainer.run_dir, actor, critic) if cfg.trainer.resume else 0
            if start == 0 and cfg.sft.steps:
                warm_start(actor, task, tokenizer, cfg)
            prompts = PromptSource(task, tokenizer, cfg.data.prompts_per_step, cfg.data.group_size, cfg.data.seed)
            log = MetricsLog(cfg.trainer.run_dir, cfg.trainer.total_steps, start, cfg.trainer.progress,
                             cfg.trainer.logger, config=to_dict(cfg))
            try:
                for step in range(start, cfg.trainer.total_steps):
                    check_stop()
                    record = train_step(step, prompts.batch(step), actor, critic, reward, cfg)
                    history.append(record)
                    log.write(record)
                    if cfg.trainer.save_every and (step + 1) % cfg.trainer.save_every == 0:
                        checkpoint.save(cfg.trainer.run_dir, step, actor, critic)
            finally:
                log.close()
        except Stopped as e:
            # A flight recorder writes no whole trace: its dump, if any, is said by _stop_tracing.
            e.step, e.trace = step, trace_path if not cfg.trace.window else None
            raise
        except RemoteCallError as e:   # a survivor's echo of a lost peer: name the peer (runtime.lost_peer)
            died = lost_peer(groups, e)
            if died is None:
                raise
            raise died from None
        finally:
            guard.begin_cleanup(spill)
            # The trace first: `ray job stop` gives the driver 3 s (RAY_JOB_STOP_WAIT_TIME_S) before SIGKILL,
            # and before the workers go: their last events are still in flight.
            if written := _stop_tracing(trace_path, sys.exc_info()[1], cfg.trace.window):
                guard.trace_written(written)
            if control:
                rldbg.control.stop()   # releases a parked step gate, removes the hub file
            shutdown_groups(groups.values())
            stop_ray(started)
    return history


def train_step(step: int, batch, actor, critic, reward, cfg: Config) -> dict:
    t = PhaseTimer()
    with instrument.step(step), t("step"):
        with t("rollout"):
            actor.to_rollout_mode()                          # wake rollout, sync weights, offload optimizer
            batch = actor.generate_sequences(batch)
            actor.to_train_mode()                            # free KV cache, sleep rollout, reload optimizer
        with t("reward"):
            batch = batch.union(reward.compute_scores(batch))
        with t("log_prob"):
            if needs_old_log_prob(cfg):                      # several updates per batch: keep the behaviour policy
                batch = batch.union(actor.compute_log_prob(batch))
            if needs_ref_log_prob(cfg):
                batch = batch.union(actor.compute_ref_log_prob(batch))
            if critic:
                batch = batch.union(critic.compute_values(batch))
        with t("advantage"):
            batch = compute_advantages(batch, cfg.algorithm)
        metrics = dict(batch.meta.get("metrics", {}))
        if critic:
            with t("update_critic"):
                metrics.update(critic.update_critic(batch).meta["metrics"])
        if step >= cfg.critic.warmup_steps:
            with t("update_actor"):
                metrics.update(actor.update_actor(batch).meta["metrics"])
    scores = batch.tensors["scores"]
    n_tokens = int(batch.tensors["attention_mask"].sum())
    record = {"step": step, "reward/mean": float(scores.mean()), "reward/max": float(scores.max()),
              "response_length": float(batch.tensors["response_mask"].sum(-1).mean()),
              **reduce_metrics(metrics), "tokens": n_tokens,
              "tokens_per_s": n_tokens / max(t.seconds["step"], 1e-9)}
    record.update({f"time/{k}": round(v, 4) for k, v in t.seconds.items()})
    return record


def needs_old_log_prob(cfg: Config) -> bool:
    """With one epoch over one mini-batch the update is on-policy: the ratio's denominator is
    the policy being differentiated, so update_actor uses its own detached log-probs and the
    extra forward pass is skipped. A KL penalty in the reward needs them before the update."""
    a, batch = cfg.actor, cfg.data.prompts_per_step * cfg.data.group_size
    return a.ppo_epochs > 1 or a.mini_batch_size < batch or cfg.algorithm.kl_in_reward


def needs_ref_log_prob(cfg: Config) -> bool:
    """The reference forward pass feeds a KL term, or the kl_to_ref metric when that is asked for."""
    return cfg.actor.use_kl_loss or cfg.algorithm.kl_in_reward or cfg.actor.kl_metric


def warm_start(actor, task, tokenizer, cfg: Config) -> None:
    """Supervised steps that teach the answer format only (see the task's sft_examples)."""
    rng = np.random.default_rng(cfg.trainer.seed + 7)
    for _ in range(cfg.sft.steps):
        batch = sft_batch(task, tokenizer, cfg.sft.batch_size, rng, cfg.rollout.max_new_tokens)
        actor.sft_update(batch)
    actor.reset_reference()


def worker_env(cfg: Config) -> dict:
    """Environment for worker processes: rldbg's switches (validated here, on the driver) travel
    to every rank."""
    profile = None
    if (p := cfg.profile).on:
        profile = {"dir": profile_dir(cfg), "roles": p.roles, "ranks": p.ranks, "steps": p.steps, "methods": p.methods,
                   "run": Path(cfg.trainer.run_dir).name}
    return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            **rldbg.worker_env(breakpoints=cfg.debug.breakpoints, post_mortem=cfg.debug.post_mortem,
                               listen_roles=cfg.debug.listen_roles, listen_ranks=cfg.debug.listen_ranks,
                               profile=profile, on_nonfinite=cfg.debug.on_nonfinite,
                               failures_dir=failures_dir(cfg))}


def failures_dir(cfg: Config) -> str:
    """Where a failing call's inputs, output and error are saved (rldbg's non-finite sentinel)."""
    return str(Path(cfg.trainer.run_dir).resolve() / "failures")


def _check_cluster(cfg: Config, started: bool) -> None:
    """Impossible resources fail in one line now, not after a placement group's 60 s wait."""
    import ray

    from reference_trainer.config_checks import check_fits
    try:
        check_fits(cfg, ray.cluster_resources(), "the Ray cluster")
    except Exception:
        stop_ray(started)
        raise


def profile_dir(cfg: Config) -> str:
    return cfg.profile.dir or str(Path(cfg.trainer.run_dir).resolve() / "tb")


def _start_control(cfg: Config) -> bool:
    if not cfg.control.enabled:
        return False
    info = rldbg.control.start(port=cfg.control.port, gate_timeout_s=cfg.control.gate_timeout_s)
    print(f"rldbg control hub at {info['url']} (token in {info['file']}); watch with `rldbg top --job {info['run']}`",
          flush=True)
    return True


def _start_tracing(cfg: Config) -> tuple:
    """(trace path, the spill directory its events go to until the export); Nones untraced. A flight
    recorder keeps its events in memory: no spill."""
    if not (cfg.trace.enabled or cfg.trace.path):
        return None, None
    path = cfg.trace.path or str(Path(cfg.trainer.run_dir) / "trace.json.gz")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    spill = rldbg.trace.start(path, memory_hz=cfg.trace.memory_hz, flush_interval=cfg.trace.flush_s,
                      profile_dir=profile_dir(cfg) if cfg.profile.on else None, window=cfg.trace.window,
                      steps=cfg.trace.steps, hang_s=cfg.trace.hang_s)
    if cfg.trace.window:
        print(f"flight recorder: the last {cfg.trace.window} steps of every process in memory; written to "
              f"{Path(path).parent}/flight-<step>-<trigger>.json.gz on a trigger (`rldbg dump` writes one now)",
              flush=True)
    return path, None if cfg.trace.window else spill


def _stop_tracing(path: str | None, failure: BaseException | None = None, window: int = 0) -> str | None:
    """Write the trace (its path returned); with the flight recorder, dump the last window if the run
    is failing."""
    if path is None:
        return None
    reason, detail = _stop_reason(failure)
    out = rldbg.trace.stop(reason=reason, **detail)
    dumps = rldbg.trace.last_dumps()
    if window:
        for d in dumps:
            at = "before the first step" if d["step"] is None else f"at step {d['step']}"
            took = f", {d['seconds']:.1f} s after the trigger" if d["seconds"] is not None else ""
            if d["state"] == "written":
                done = f"written to {d['path']}{took}"
            else:   # cut short by the exit: what reached the dump's spill is there, a directory export reads
                done = (f"not written ({d['state']}{': ' + d['error'] if d['error'] else ''}); what reached it: "
                        f"`rldbg export {d['spill']} -o {d['path']}`")
            print(f"flight recorder: {d['reason']} {at}, last window {done}"
                  + (f" (and {d['coalesced']} later trigger(s))" if d["coalesced"] else ""), flush=True)
        if not dumps:
            print("flight recorder: no trigger, nothing written", flush=True)
    elif out:
        print(f"{rldbg.trace.loss_line(out)} (look: `rldbg open {out}`; summary: `rldbg report {out}`)", flush=True)
    return None if window else out


def _stop_reason(failure: BaseException | None) -> tuple:
    """Why the run ends, in the flight recorder's words (None: it ends well)."""
    if failure is None:
        return None, {}
    # Where it happened, when the failure says (NonFinite, RankDied and RemoteCallError name the
    # rank, method and step; Stopped its step): the dump's trigger is marked there.
    who = {k: getattr(failure, k) for k in ("role", "rank", "method", "step")
           if isinstance(getattr(failure, k, None), (str, int))}
    if isinstance(failure, Stopped):
        return failure.signame, who
    if isinstance(failure, rldbg.NonFinite):
        return "nonfinite", who
    name = "rank_died" if type(failure).__name__ == "RankDied" else "exception"
    return name, dict(who, error=f"{type(failure).__name__}: {failure}"[:500])

