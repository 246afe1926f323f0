"""A plain VeRL single-controller program (no rldbg in it): two worker groups on CPU, a few
steps of actor.update_actor then critic.compute_values. rldbg's tests run it with RLDBG_VERL=1.

Environment: DASHBOARD_PORT (default 8265), STEPS (default 4); SLOW_RANK/SLOW_METHOD/SLOW_S make
one rank of ActorWorker sleep (tests/verl_workers.py).
"""
import os

import ray
import torch

from verl import DataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_workers import ActorWorker, CriticWorker


def main():
    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=True,
             dashboard_host="127.0.0.1", dashboard_port=int(os.environ.get("DASHBOARD_PORT", "8265")),
             log_to_driver=False)
    groups = {}
    for role, cls in (("actor", ActorWorker), ("critic", CriticWorker)):
        pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
        groups[role] = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(cls)), name_prefix=role)
    data = DataProto.from_dict({"x": torch.arange(32).reshape(8, 4)})
    for step in range(int(os.environ.get("STEPS", "4"))):
        out = groups["actor"].update_actor(data)
        values = groups["critic"].compute_values(out.union(data))
        print(f"step {step}: values {values.batch['values'].flatten().tolist()[:2]}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
