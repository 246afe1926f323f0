"""How rldbg makes its own Ray actors (the control hub): the options they share, in one place.

- num_cpus=0: they must never hold a CPU the user's job asked for (or wait for one);
- max_restarts=0: Ray does not restart them; rldbg does what a death needs itself (the gate
  releases the run when the hub is gone);
- enable_task_events=False: the driver's gate syncs with the hub 4 times a second, for the whole
  run. As task events those calls cost each caller and the GCS work, filled the dashboard's task
  list with rldbg's own traffic, and crowded the user's tasks out of the GCS's bounded task
  store, where `rldbg breakpoints` looks up a paused worker's task.
"""
from __future__ import annotations


def own_actor_class(ray, cls, **options):
    """`cls` as a Ray actor class for one of rldbg's services; `options` add to the shared ones."""
    return ray.remote(num_cpus=0, max_restarts=0, enable_task_events=False, **options)(cls)
