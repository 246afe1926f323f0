"""rldbg.worker_env owns every RLDBG_* switch a worker reads: it builds them from plain values,
validates them on the driver (one line naming the bad value), and passes on switches already set."""
from __future__ import annotations

import pytest

import rldbg
from rldbg.debug.specs import SpecSet
from rldbg.profilers.spec import parse as parse_profile


def test_builds_every_switch_workers_read():
    env = rldbg.worker_env(breakpoints=["actor.update_actor@rank=1", "critic.*@step=2-3"], post_mortem=True,
                           listen_roles=["actor", "critic"], listen_ranks=[0, 1],
                           profile={"dir": "/tmp/p", "roles": ["critic"], "steps": [2]},
                           cuda_memory_snapshot="/tmp/snap", inherit=False)
    assert [s.text for s in SpecSet.from_env(env).list()] == ["actor.update_actor@rank=1", "critic.*@step=2|3"]
    assert env["RLDBG_POST_MORTEM"] == "1" and env["RLDBG_LISTEN_ROLES"] == "actor,critic"
    assert env["RLDBG_LISTEN_RANKS"] == "0,1" and env["RLDBG_CUDA_MEMORY_SNAPSHOT"] == "/tmp/snap"
    spec = parse_profile(env["RLDBG_PROFILE"])
    assert spec.roles == {"critic"} and spec.steps == {2}
    assert rldbg.runtime_env(post_mortem=True, inherit=False) == {"env_vars": {"RLDBG_POST_MORTEM": "1"}}
    assert rldbg.worker_env(inherit=False) == {}


def test_inherits_driver_switches_unless_given():
    driver = {"RLDBG_BREAKPOINTS": "reward.*", "RLDBG_LISTEN_RANKS": "1", "RAY_DEBUG_POST_MORTEM": "1",
              "RLDBG_TOKEN": "secret", "HOME": "/root"}
    env = rldbg.worker_env(listen_ranks=[0], environ=driver)
    assert env == {"RLDBG_BREAKPOINTS": "reward.*", "RLDBG_LISTEN_RANKS": "0", "RAY_DEBUG_POST_MORTEM": "1"}


@pytest.mark.parametrize("kwargs, needle", [
    ({"breakpoints": ["actor.update_actor@rank=x"]}, "rank=x"),
    ({"listen_ranks": "x1"}, "bad RLDBG_LISTEN_RANKS 'x1'"),
    ({"profile": {"dir": "/tmp/p", "steps": ["two"]}}, "steps"),
    ({"profile": {"roles": ["actor"]}}, "'dir'"),
    ({"post_mortem": "no"}, "bad post_mortem 'no': accepted True, False"),
])
def test_bad_values_fail_on_the_driver(kwargs, needle):
    with pytest.raises(ValueError, match=needle) as e:
        rldbg.worker_env(inherit=False, **kwargs)
    assert "\n" not in str(e.value)
