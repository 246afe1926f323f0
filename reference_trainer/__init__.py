"""The reference PPO/GRPO trainer rldbg is built and tested on: `python -m reference_trainer`."""
import os as _os

# An embedded cluster (no RAY_ADDRESS: reference_trainer.runtime) stays on loopback only when this is
# set before anything imports ray (FACTS: Ray binding), and modules here import ray before runtime
# does: set first, as the package loads. A driver joining a cluster resolves its own address.
if _os.environ.get("RAY_ADDRESS", "local") == "local":
    _os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
