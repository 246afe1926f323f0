"""A plain VeRL program in main_ppo's layout (no rldbg in it) whose outputs go non-finite: the
driver starts a TaskRunner actor whose run() loops over 3 steps of update_actor, score and total.
At step 2 one rank's score is NaN (a reward bug, tests/verl_workers.py), at step 3 the custom
collect of `total` divides 0 by 0 (a value no rank returned). Environment: DASHBOARD_PORT."""
import os

import ray
import torch

from verl import DataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_workers import ActorWorker

STEPS = 3


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self) -> int:
        pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
        actor = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(ActorWorker)), name_prefix="actor")
        for step in range(1, STEPS + 1):
            data = DataProto.from_dict({"x": torch.arange(32).reshape(8, 4)},
                                       meta_info={"nan_rank": 1 if step == 2 else None})
            actor.update_actor(data)
            actor.score(data)
            actor.total(0.0 if step == 3 else 1.0)
        return os.getpid()


def main():
    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=True,
             dashboard_host="127.0.0.1", dashboard_port=int(os.environ.get("DASHBOARD_PORT", "8265")),
             log_to_driver=True)
    runner = TaskRunner.remote()   # held, as main_ppo does: Ray 2.41 refuses a call on a dropped handle
    print(f"controller pid {ray.get(runner.run.remote())}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
