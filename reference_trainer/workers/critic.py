"""The critic: a value model trained with a clipped value loss (PPO with GAE)."""
from __future__ import annotations

from pathlib import Path

import torch

from rldbg import instrument

from reference_trainer import algos
from reference_trainer.protocol import DataProto
from reference_trainer.single_controller import Dispatch, Worker, register
from reference_trainer.tasks import build_value_model
from reference_trainer.workers import train_ops as ops
from reference_trainer.workers.hybrid import DTYPES, load_tokenizer_for
from reference_trainer.workers.offload import Offloader, resolve_target


class CriticWorker(Worker):
    role = "critic"

    def __init__(self, config, info):
        super().__init__(config, info)
        base = Path(config.offload.dir or Path(config.trainer.run_dir) / "offload")
        self.offloader = Offloader(resolve_target(config.offload.target, info.device),
                                   base / f"critic-rank{info.rank}", self.device,
                                   shared=None if config.offload.dir else base)

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict:
        cfg = self.config
        vocab = len(load_tokenizer_for(cfg.model.preset))
        self.model = build_value_model(cfg.model.preset, vocab, seed=cfg.trainer.seed + 1,
                                       dtype=DTYPES[cfg.model.dtype]).to(self.device)
        ops.broadcast_module(self.model)
        self.optimizer = ops.adamw(self.model.parameters(), lr=cfg.critic.lr)
        self._report_ledger()
        return {"params": sum(p.numel() for p in self.model.parameters())}

    @register(Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def compute_values(self, batch: DataProto) -> DataProto:
        r_len = batch.tensors["responses"].shape[1]
        out = []
        for micro in batch.split(ops.micro_sizes(len(batch), self.config.critic.micro_batch_size)):
            v = ops.response_values(self.model, micro.tensors["input_ids"].to(self.device),
                                    micro.tensors["attention_mask"].to(self.device), r_len)
            out.append((v * micro.tensors["response_mask"].to(v.device)).cpu())
        return DataProto.from_dict(tensors={"values": torch.cat(out)})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, batch: DataProto) -> DataProto:
        c = self.config.critic
        r_len = batch.tensors["responses"].shape[1]
        if self.offloader.is_offloaded("optimizer"):
            with instrument.transition("reload_optimizer", loads=("critic_optimizer",)):
                self.offloader.reload("optimizer")

        def loss_fn(micro: DataProto, denom: float, world: int):
            t = {k: v.to(self.device) for k, v in micro.tensors.items()}
            mask = ops.loss_mask(micro).to(self.device)
            values = ops.response_values(self.model, t["input_ids"], t["attention_mask"], r_len)
            loss, stats = algos.value_loss(values, t["values"], t["returns"], mask, clip_range=c.value_clip,
                                           agg_mode="token-mean", global_denominator=denom, dp_size=world)
            local = ops.local_scale(mask, "token-mean", denom, world)
            return loss, {"critic/vf_loss": float(loss.detach()) * local, "critic/vf_clipfrac": stats["vf_clipfrac"]}

        metrics = ops.minibatch_update(batch, self.model, self.optimizer, c.mini_batch_size, c.micro_batch_size,
                                       c.ppo_epochs, c.grad_clip, "token-mean", loss_fn)
        metrics = {("critic/grad_norm" if k == "grad_norm" else k): v for k, v in metrics.items()}
        if self.config.offload.optimizer:  # the critic's optimizer is idle until the next update
            with instrument.transition("offload_optimizer", frees=("critic_optimizer",)):
                self.offloader.offload("optimizer", ops.optimizer_tensors(self.optimizer))
        self._report_ledger()
        return DataProto.from_dict(meta={"metrics": metrics})

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, directory: str) -> None:
        if self.offloader.is_offloaded("optimizer"):
            self.offloader.reload("optimizer")
        if self.rank == 0:
            Path(directory).mkdir(parents=True, exist_ok=True)
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
                       Path(directory) / "critic.pt")

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, directory: str) -> None:
        state = torch.load(Path(directory) / "critic.pt", map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def _report_ledger(self) -> None:
        instrument.ledger("critic_params", ops.tensor_bytes(self.model.parameters(), self.device))
        instrument.ledger("critic_optimizer", ops.tensor_bytes(ops.optimizer_tensors(self.optimizer), self.device))

