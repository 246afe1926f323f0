"""Single controller: a driver calls worker-group methods; @register says how each call is
split across ranks (dispatch) and merged back (collect)."""
from reference_trainer.single_controller.decorator import register, registered_methods
from reference_trainer.single_controller.dispatch import Dispatch, DispatchMode, register_dispatch_mode
from reference_trainer.single_controller.host import RemoteCallError
from reference_trainer.single_controller.resource_pool import ResourcePool
from reference_trainer.single_controller.worker import RankInfo, Worker
from reference_trainer.single_controller.worker_group import (
    CallFuture, WorkerGroup, shutdown_groups, spawn_role_groups,
)

__all__ = [
    "register", "registered_methods", "Dispatch", "DispatchMode", "register_dispatch_mode",
    "RemoteCallError", "ResourcePool", "RankInfo", "Worker", "CallFuture", "WorkerGroup",
    "shutdown_groups", "spawn_role_groups",
]
