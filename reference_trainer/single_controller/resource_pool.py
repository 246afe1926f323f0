"""A resource pool: N ranks' worth of resources reserved as one Ray placement group, so a
role group's ranks are scheduled together (or not at all) before any work starts."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ResourcePool:
    name: str
    n_ranks: int
    cpus_per_rank: float = 1.0
    gpus_per_rank: float = 0.0
    strategy: str = "PACK"
    ready_timeout_s: float = 60.0

    def __post_init__(self):
        if self.n_ranks < 1:
            raise ValueError(f"resource pool {self.name!r}: n_ranks={self.n_ranks}; it must be ≥ 1")
        self._pg = None

    @property
    def device(self) -> str:
        return "cuda" if self.gpus_per_rank > 0 else "cpu"

    def placement_group(self):
        if self._pg is None:
            import ray
            from ray.util.placement_group import placement_group

            bundle = {"CPU": self.cpus_per_rank}
            if self.gpus_per_rank:
                bundle["GPU"] = self.gpus_per_rank
            pg = placement_group([dict(bundle) for _ in range(self.n_ranks)], strategy=self.strategy)
            ready, _ = ray.wait([pg.ready()], timeout=self.ready_timeout_s)
            if not ready:
                total, free = ray.cluster_resources(), ray.available_resources()
                ray.util.remove_placement_group(pg)
                have = ", ".join(f"{k} {free.get(k, 0):g} free of {total.get(k, 0):g}" for k in bundle)
                raise RuntimeError(
                    f"resource pool {self.name!r} needs {self.n_ranks} × {bundle} but the cluster has {have} "
                    f"(after {self.ready_timeout_s:g} s); lower resources.n_ranks or "
                    f"resources.cpus_per_rank / resources.gpus_per_rank, or free the cluster"
                )
            self._pg = pg
        return self._pg

    def release(self) -> None:
        if self._pg is not None:
            import ray

            ray.util.remove_placement_group(self._pg)
            self._pg = None
