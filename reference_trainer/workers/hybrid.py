"""The hybrid engine worker: actor (trained policy), rollout engine and reference policy on
one rank, switching between train mode and rollout mode through named transitions.

    to_rollout_mode:  wake rollout → sync actor weights into it → offload grads, optimizer
                      (and actor params when configured)
    to_train_mode:    release KV cache → put rollout to sleep → reload params and optimizer
"""
from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import torch

from rldbg import instrument

from reference_trainer import algos
from reference_trainer.engines.base import SamplingConfig, make_engine
from reference_trainer.protocol import DataProto
from reference_trainer.single_controller import Dispatch, Worker, register
from reference_trainer.tasks import build_causal_lm, build_tokenizer, load_tokenizer
from reference_trainer.workers import train_ops as ops
from reference_trainer.workers.offload import Offloader, resolve_target, tune_allocator_for_offload

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_tokenizer_for(preset: str):
    return load_tokenizer(preset) if Path(preset).is_dir() else build_tokenizer()


class ActorRolloutRefWorker(Worker):
    role = "actor"

    def __init__(self, config, info):
        super().__init__(config, info)
        if info.device == "cpu":
            tune_allocator_for_offload()
        base = Path(config.offload.dir or Path(config.trainer.run_dir) / "offload")
        self.offloader = Offloader(resolve_target(config.offload.target, info.device),
                                   base / f"actor-rank{info.rank}", self.device,
                                   shared=None if config.offload.dir else base)
        self.mode = "uninitialised"
        self._optimizer_entries = 0   # the optimizer's state entries at its last report after an update

    # ---- set-up -------------------------------------------------------------------------
    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        cfg = self.config
        self.tokenizer = load_tokenizer_for(cfg.model.preset)
        dtype = DTYPES[cfg.model.dtype]
        self.model = build_causal_lm(cfg.model.preset, len(self.tokenizer), seed=cfg.trainer.seed,
                                     dtype=dtype).to(self.device)
        ops.broadcast_module(self.model)
        self.model.train()
        self.optimizer = ops.adamw(self.model.parameters(), lr=cfg.actor.lr, weight_decay=cfg.actor.weight_decay)
        self.ref = copy.deepcopy(self.model).eval().requires_grad_(False)
        self._params, self._ref_params = list(self.model.parameters()), list(self.ref.parameters())
        self.rollout = self._make_rollout()
        self.mode = "train"
        self._report_ledger()
        return {"params": sum(p.numel() for p in self.model.parameters())}

    def _make_rollout(self):
        cfg = self.config
        ids = dict(pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id)
        if cfg.rollout.engine == "vllm":
            model_dir = Path(cfg.trainer.run_dir) / f"rollout-init-rank{self.rank}"
            self.model.save_pretrained(model_dir)
            self.tokenizer.save_pretrained(model_dir)
            return make_engine("vllm", model_dir=str(model_dir), dtype=cfg.model.dtype,
                               gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
                               seed=cfg.trainer.seed + self.rank, **ids)
        return make_engine("hf", model=copy.deepcopy(self.model), offloader=self.offloader, **ids)

    # ---- mode transitions -----------------------------------------------------------------
    @register(Dispatch.ONE_TO_ALL)
    def to_rollout_mode(self) -> None:
        off = self.config.offload
        # The call's own span marks the mode switch; each step inside is a transition of its own.
        with self._transition("rollout_wake", loads=("rollout_weights",), tags="weights"):
            self.rollout.wake_up(tags=("weights",))
        # After a level-2 sleep the weights come back here, allocated anew by the copy.
        with self._transition("sync_weights", loads=("rollout_weights",)):
            self.rollout.load_weights((n, t.detach()) for n, t in self._named_weights())
        with self._transition("rollout_wake", loads=("kv_cache",), tags="kv_cache"):
            self.rollout.wake_up(tags=("kv_cache",))
        if off.grads:
            with self._transition("offload_grads", frees=("grads",)) as counted:
                self.optimizer.zero_grad(set_to_none=True)
                counted["grads"] = 0   # set_to_none: no parameter holds a gradient now
                self.offloader.give_back_memory()
        if off.optimizer:
            with self._transition("offload_optimizer", frees=("optimizer",)) as counted:
                self._offload(counted, "optimizer", "optimizer", ops.optimizer_tensors(self.optimizer))
        if off.params:
            with self._transition("offload_params", frees=("params",)) as counted:
                self._offload(counted, "params", "actor_params", list(self.model.parameters()))
        self.mode = "rollout"

    @register(Dispatch.ONE_TO_ALL)
    def to_train_mode(self) -> None:
        with self._transition("release_kv_cache", frees=("kv_cache",)):
            self.rollout.release_kv_cache()
        level = self.config.rollout.sleep_level
        with self._transition("rollout_sleep", frees=("rollout_weights", "kv_cache"), level=level):
            self.rollout.sleep(level)
        if self.offloader.is_offloaded("actor_params"):
            with self._transition("reload_params", loads=("params",)) as counted:
                counted["params"] = self.offloader.reload("actor_params")
        if self.offloader.is_offloaded("optimizer"):
            with self._transition("reload_optimizer", loads=("optimizer",)) as counted:
                counted["optimizer"] = self.offloader.reload("optimizer")
        self.mode = "train"

    # ---- rollout ------------------------------------------------------------------------
    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        if self.mode != "rollout":
            raise RuntimeError(f"generate_sequences needs rollout mode, but the worker is in {self.mode} mode; "
                               "call to_rollout_mode() first")
        r = self.config.rollout
        ids = prompts.tensors["input_ids"].to(self.device)
        mask = prompts.tensors["attention_mask"].to(self.device)
        responses = self.rollout.generate(ids, mask, SamplingConfig(r.max_new_tokens, r.temperature, r.top_p))
        resp_mask = ops.response_mask_from(responses, self.tokenizer.eos_token_id)
        self._report_ledger({"kv_cache"})  # alive until to_train_mode releases it
        return DataProto.from_dict(
            tensors={"prompts": ids.cpu(), "responses": responses.cpu(),
                     "input_ids": torch.cat([ids, responses], -1).cpu(),
                     "attention_mask": torch.cat([mask, resp_mask.to(mask.dtype)], -1).cpu(),
                     "response_mask": resp_mask.cpu()},
            non_tensors=dict(prompts.non_tensors),
        )

    # ---- log-probs ------------------------------------------------------------------------
    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, batch: DataProto) -> DataProto:
        logp, ent = self._logprobs(self.model, batch, with_entropy=True)
        mask = ops.loss_mask(batch)
        out = DataProto.from_dict(tensors={"old_log_probs": logp})
        out.add_metrics({"actor/entropy": float(algos.masked_mean(ent, mask)) if mask.sum() else 0.0})
        return out

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        if self.config.offload.ref and self.offloader.is_offloaded("ref_params"):
            with self._transition("reload_ref", loads=("ref_params",)) as counted:
                counted["ref_params"] = self.offloader.reload("ref_params")
        logp, _ = self._logprobs(self.ref, batch)
        if self.config.offload.ref:
            with self._transition("offload_ref", frees=("ref_params",)) as counted:
                self._offload(counted, "ref_params", "ref_params", list(self.ref.parameters()))
        return DataProto.from_dict(tensors={"ref_log_probs": logp})

    @torch.no_grad()
    def _logprobs(self, model, batch: DataProto, with_entropy: bool = False):
        r_len = batch.tensors["responses"].shape[1]
        logps, ents = [], []
        for micro in batch.split(ops.micro_sizes(len(batch), self.config.actor.micro_batch_size)):
            ids = micro.tensors["input_ids"].to(self.device)
            mask = micro.tensors["attention_mask"].to(self.device)
            logp, ent = ops.response_logprobs(model, ids, mask, r_len, self.config.rollout.temperature, with_entropy)
            logps.append(logp.cpu())
            ents.append(ent.cpu() if ent is not None else None)
        logp = torch.cat(logps)
        return logp, (torch.cat(ents) if with_entropy else None)

    # ---- training -------------------------------------------------------------------------
    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, batch: DataProto) -> DataProto:
        if self.mode != "train":
            raise RuntimeError(f"update_actor needs train mode, but the worker is in {self.mode} mode; "
                               "call to_train_mode() first")
        a = self.config.actor
        r_len = batch.tensors["responses"].shape[1]
        temperature = self.config.rollout.temperature

        def loss_fn(micro: DataProto, denom: float, world: int):
            t = {k: v.to(self.device) for k, v in micro.tensors.items()}
            mask = ops.loss_mask(micro).to(self.device)
            logp, ent = ops.response_logprobs(self.model, t["input_ids"], t["attention_mask"], r_len,
                                              temperature, with_entropy=True)
            # On-policy (one epoch, one mini-batch): the behaviour policy is this very forward pass.
            old = t["old_log_probs"] if "old_log_probs" in t else logp.detach()
            agg = dict(agg_mode=a.loss_agg, global_denominator=denom, dp_size=world)
            loss, stats = algos.policy_loss(logp, old, t["advantages"], mask, clip_low=a.clip_low,
                                            clip_high=a.clip_high, dual_clip_c=a.dual_clip_c, **agg)
            # Metrics are this micro-batch's own means (averaged over ranks by the driver); the
            # losses carry the global denominator so that gradients do not depend on the rank count.
            local = ops.local_scale(mask, a.loss_agg, denom, world)
            out = {"actor/pg_loss": float(loss.detach()) * local, "actor/clipfrac": stats["clipfrac"],
                   "actor/ppo_kl": stats["approx_kl"],
                   "actor/entropy": float(algos.masked_mean(ent.detach(), mask))}
            if a.entropy_coef > 0:
                loss = loss - a.entropy_coef * algos.agg_loss(ent, mask, a.loss_agg, denom, world)
            if "ref_log_probs" in t:
                kl = algos.kl_estimate(logp, t["ref_log_probs"], a.kl_loss_type)
                out["kl_to_ref"] = float(algos.masked_mean(kl.detach(), mask))
                if a.use_kl_loss:
                    kl_loss = algos.agg_loss(kl, mask, a.loss_agg, denom, world)
                    out["actor/kl_loss"] = float(kl_loss.detach()) * local
                    loss = loss + a.kl_loss_coef * kl_loss
            return loss, out

        metrics = ops.minibatch_update(batch, self.model, self.optimizer, a.mini_batch_size, a.micro_batch_size,
                                       a.ppo_epochs, a.grad_clip, a.loss_agg, loss_fn)
        metrics["actor/lr"] = [self.optimizer.param_groups[0]["lr"]]
        self._report_update()
        return DataProto.from_dict(meta={"metrics": metrics})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def sft_update(self, batch: DataProto) -> DataProto:
        """Supervised warm start: maximise the log-likelihood of the given responses."""
        a = self.config.actor
        r_len = batch.tensors["responses"].shape[1]

        def loss_fn(micro: DataProto, denom: float, world: int):
            ids = micro.tensors["input_ids"].to(self.device)
            mask = ops.loss_mask(micro).to(self.device)
            logp, _ = ops.response_logprobs(self.model, ids, micro.tensors["attention_mask"].to(self.device), r_len)
            loss = -algos.agg_loss(logp, mask, "token-mean", denom, world)
            return loss, {"sft/loss": float(loss.detach()) * ops.local_scale(mask, "token-mean", denom, world)}

        metrics = ops.minibatch_update(batch, self.model, self.optimizer, len(batch) * ops.world_size(),
                                       a.micro_batch_size, 1, a.grad_clip, "token-mean", loss_fn)
        self._report_update()
        return DataProto.from_dict(meta={"metrics": metrics})

    @register(Dispatch.ONE_TO_ALL)
    def reset_reference(self) -> None:
        """Make the current actor the reference policy (after a supervised warm start)."""
        self.ref.load_state_dict(self.model.state_dict())

    # ---- checkpoints and introspection ------------------------------------------------------
    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, directory: str) -> None:
        if self.rank == 0:
            Path(directory).mkdir(parents=True, exist_ok=True)
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "ref": self.ref.state_dict()}, Path(directory) / "actor.pt")

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, directory: str) -> None:
        state = torch.load(Path(directory) / "actor.pt", map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.ref.load_state_dict(state["ref"])
        self._report_ledger()

    @register(Dispatch.ONE_TO_ALL)
    def weights_checksum(self) -> float:
        with torch.no_grad():
            return float(sum(p.double().sum() * (i + 1) for i, p in enumerate(self.model.parameters())))

    @register(Dispatch.ONE_TO_ALL)
    def memory_report(self) -> dict:
        return {**self._ledger(), "rss": _rss_bytes(), "mode": self.mode}

    def _named_weights(self):
        yield from self.model.named_parameters()
        yield from self.model.named_buffers()

    def _ledger(self, only=None) -> dict[str, int]:
        """Bytes by category on the compute device (what an offload moves to the host leaves it);
        with `only`, just those categories (a transition reports what it declares)."""
        # Lists kept from init_model: walking the module tree for its parameters costs more than
        # the counting, and an offload swaps a parameter's storage, never the parameter. Plain
        # branches: a traced run asks at every transition, on the training thread.
        dev, ledger = self.device, {}
        want = (lambda category: True) if only is None else only.__contains__
        if want("params"):
            ledger["params"] = ops.tensor_bytes(self._params, dev)
        if want("grads"):
            ledger["grads"] = ops.tensor_bytes(ops.grads(self._params), dev)
        if want("optimizer"):
            ledger["optimizer"] = ops.tensor_bytes(ops.optimizer_tensors(self.optimizer), dev)
        if want("ref_params"):
            ledger["ref_params"] = ops.tensor_bytes(self._ref_params, dev)
        if only is None or not only <= _OWN:
            ledger.update((k, v) for k, v in self.rollout.memory_ledger(only).items() if want(k))
        return ledger

    def _report_ledger(self, only=None, counted=None) -> None:
        """Report `only` (None: every category); those in `counted` with the size given there."""
        if not instrument.enabled():
            return   # the byte counts walk every tensor: only worth it when someone records them
        ledger = self._ledger(set(only) - counted.keys()) if counted else self._ledger(only)
        if counted:
            ledger.update(counted)
        for category, nbytes in ledger.items():
            instrument.ledger(category, nbytes)

    def _offload(self, counted: dict, category: str, group: str, tensors: list) -> None:
        self.offloader.offload(group, tensors)
        if self.offloader.is_offloaded(group):   # emptied, or on the host: none of it is on the device
            counted[category] = 0

    def _report_update(self) -> None:
        """After an update, what changed: rldbg's ledger takes a report when a category changes. The
        gradients are gone (minibatch_update ends with zero_grad(set_to_none=True)), as at the last
        report; the optimizer holds what its last report said unless this update gave parameters
        their first state (Adam's moments appear at a parameter's first step). Counted as reported
        only while recording: a trace that starts later still gets the first report."""
        if len(self.optimizer.state) != self._optimizer_entries and instrument.enabled():
            self._optimizer_entries = len(self.optimizer.state)
            self._report_ledger({"grads", "optimizer"})

    @contextlib.contextmanager
    def _transition(self, name: str, frees=(), loads=(), **args):
        """A transition that reports the categories it declares as its last act, so that rldbg
        sets what the ledger says moved beside what the allocator and the device did. The body
        may put a category's new size in the dict it is given (`counted`) where it knows it from
        moving the tensors: a walk over them afterwards finds them cold (an offload's munmap, a
        weight copy or malloc_trim between), ~50 µs a walk on the training thread."""
        counted: dict = {}
        with instrument.transition(name, frees=frees, loads=loads, **args):
            yield counted
            if frees or loads:
                self._report_ledger(set(frees) | set(loads), counted)


_OWN = frozenset({"params", "grads", "optimizer", "ref_params"})   # the rest is the rollout engine's


def _rss_bytes() -> int:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
