"""Several controllers in one VeRL job (plain VeRL, no rldbg in it): each Controller actor builds
its own worker group and calls it in a loop, as VeRL's TaskRunner does with its groups and an
evaluation actor beside it would with its own. tests/test_verl_controllers.py runs two at once."""
import os
import time

import ray
import torch

from verl import DataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


@ray.remote(num_cpus=0)
class Controller:
    def run(self, worker_cls: str, role: str, method: str, loops: int, think_s: float) -> int:
        import verl_workers
        from ray.util.placement_group import remove_placement_group

        pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(getattr(verl_workers, worker_cls))),
                            name_prefix=role)
        data = DataProto.from_dict({"x": torch.arange(32).reshape(8, 4)})
        for _ in range(loops):
            getattr(wg, method)(data)
            time.sleep(think_s)          # the controller's own work between its calls
        for w in wg.workers:
            ray.kill(w)
        for pg in pool.pgs or []:
            remove_placement_group(pg)
        return os.getpid()
