"""Worker identity is rldbg's: set_worker_identity publishes role(s)/rank/world/node for ANY
actor (here one whose repr rldbg does not control), and the CLI names it from there."""
from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import pytest  # noqa: E402
import ray  # noqa: E402

from polling import until  # noqa: E402


class Opaque:
    """A trainer's worker: its repr is the trainer's business, not an rldbg label."""

    def __init__(self, rank: int, world: int):
        from rldbg import instrument

        self.ident = instrument.set_worker_identity("actor", rank, world, roles=("actor", "ref"))

    def __repr__(self) -> str:
        return f"Opaque:{id(self)}"

    def label(self) -> str:
        return self.ident.label

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def opaque_workers(ray_cluster):
    actors = [ray.remote(Opaque).options(num_cpus=0).remote(r, 2) for r in range(2)]
    labels = ray.get([a.label.remote() for a in actors])
    refs = [a.spin.remote(60) for a in actors]
    try:
        yield ray_cluster, actors, labels
    finally:
        for a in actors:
            ray.kill(a)
        del refs


def test_identity_is_published_and_labelled_by_rldbg(opaque_workers):
    from rldbg.debug.registry import worker_identities

    _, actors, labels = opaque_workers
    assert labels == ["actor+ref[rank 0/2]", "actor+ref[rank 1/2]"]
    found = worker_identities()
    mine = {found[a._actor_id.hex()].rank: found[a._actor_id.hex()] for a in actors}
    assert sorted(mine) == [0, 1]
    assert all(i.roles == ("actor", "ref") and i.world == 2 and i.node_ip == "127.0.0.1" and i.node_id
               for i in mine.values())


def test_cli_stack_names_role_and_rank_of_an_opaque_actor(opaque_workers):
    url, _, _ = opaque_workers
    out = {}
    # RAY_ADDRESS names this cluster's GCS (other clusters may run on a shared machine); py-spy
    # sits beside the interpreter, as in an activated venv.
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}

    def stack():
        r = subprocess.run([sys.executable, "-m", "rldbg", "stack", "--address", url, "--role", "ref", "--rank", "1"],
                           capture_output=True, text=True, timeout=120, env=env)
        out["r"] = r
        return r.returncode == 0 and "ref rank 1" in r.stdout and "spin" in r.stdout

    until(stack, "rldbg stack naming ref rank 1", limit=60, interval=1.0)
    assert "rank 0" not in out["r"].stdout


def test_stack_takes_the_colocated_label_and_lists_roles_one_by_one(opaque_workers):
    """`--role actor+ref`, the label `rldbg stack` and `top` show, is accepted; an unknown role's
    error lists roles that --role takes (actor, ref), not labels it once refused."""
    url, _, _ = opaque_workers
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}

    def stack(role):
        return subprocess.run([sys.executable, "-m", "rldbg", "stack", "--address", url, "--role", role, "--rank", "1"],
                              capture_output=True, text=True, timeout=120, env=env)
    r = stack("actor+ref")
    assert r.returncode == 0 and r.stdout.startswith("actor+ref rank 1 "), r.stdout + r.stderr
    r = stack("nosuch")
    seen = r.stderr.split("roles seen: ", 1)[1].strip().split(", ")
    assert r.returncode == 1 and {"actor", "ref"} <= set(seen) and "actor+ref" not in seen, r.stderr
