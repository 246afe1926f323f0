"""A plain VeRL program in main_ppo's layout (no rldbg in it): the driver starts a TaskRunner
actor and waits for its run(), which builds two worker groups on CPU and loops over steps, as
verl.trainer.main_ppo does with RayPPOTrainer.fit(). rldbg's tests run it with RLDBG_VERL=1.

Environment: DASHBOARD_PORT (default 8265), STEPS (default 4), THINK_S (the controller's own work
between its two calls, default 0.05); SLOW_RANK/SLOW_METHOD/SLOW_S make one rank of ActorWorker
sleep (tests/verl_workers.py).
"""
import os
import time

import ray
import torch

# The driver imports VeRL, as `python -m verl.trainer.main_ppo` does (VeRL's entry point plugins
# load then: that is where RLDBG_VERL=1 takes effect in the driver).
from verl import DataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_workers import ActorWorker, CriticWorker


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self, steps: int, think_s: float) -> list:
        groups = {}
        for role, cls in (("actor", ActorWorker), ("critic", CriticWorker)):
            pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
            groups[role] = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(cls)), name_prefix=role)
        data = DataProto.from_dict({"x": torch.arange(32).reshape(8, 4)})
        seen = []
        for n in range(1, steps + 1):
            print(f"taskrunner step {n}", flush=True)   # reaches the driver's stdout (log_to_driver)
            out = groups["actor"].update_actor(data)
            time.sleep(think_s)          # the controller's own work between calls
            values = groups["critic"].compute_values(out.union(data))
            seen.append(values.batch["values"].flatten().tolist()[:2])
        return os.getpid(), seen


def main():
    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=True,
             dashboard_host="127.0.0.1", dashboard_port=int(os.environ.get("DASHBOARD_PORT", "8265")),
             log_to_driver=True)
    runner = TaskRunner.remote()
    pid, seen = ray.get(runner.run.remote(int(os.environ.get("STEPS", "4")), float(os.environ.get("THINK_S", "0.05"))))
    print(f"controller pid {pid}", flush=True)
    for step, values in enumerate(seen, 1):
        print(f"step {step}: values {values}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
