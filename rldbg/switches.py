"""Every RLDBG_* environment switch, named once: the rest of rldbg, the trainer and the VeRL plugin
import the name from here (tests/test_import_graph.py fails on a second spelling). A leaf module,
importing nothing: VeRL's plugin hook (run by `import verl` in each of its processes) pays for
this file alone. A worker's environment is built from these by rldbg.launch_env.
"""

# What a worker reads (worker_env passes them on):
BREAKPOINTS = "RLDBG_BREAKPOINTS"            # breakpoint specs, ";"-separated (rldbg.debug.specs)
POST_MORTEM = "RLDBG_POST_MORTEM"            # "1": pause at the raising frame of a failed call
LISTEN_ROLES = "RLDBG_LISTEN_ROLES"          # debug mode: these roles open a debugpy listener
LISTEN_RANKS = "RLDBG_LISTEN_RANKS"          # ... on these ranks
PROFILE = "RLDBG_PROFILE"                    # torch.profiler spec (rldbg.profilers.spec)
CUDA_MEMORY_SNAPSHOT = "RLDBG_CUDA_MEMORY_SNAPSHOT"   # CUDA memory snapshots around transitions
DEBUG_ALLOW_REMOTE = "RLDBG_DEBUG_ALLOW_REMOTE"       # let debugpy listen beyond loopback
ON_NONFINITE = "RLDBG_ON_NONFINITE"          # stop | warn | off: the non-finite sentinel (rldbg.sentinel)
FAILURES_DIR = "RLDBG_FAILURES_DIR"          # where a failing call's inputs/output/error are saved

# Ray's own post-mortem switch, honoured by rldbg's post-mortem guard too.
RAY_POST_MORTEM = "RAY_DEBUG_POST_MORTEM"

# What a worker reads; inherited from the driver's environment when not given explicitly.
WORKER_SWITCHES = (BREAKPOINTS, POST_MORTEM, RAY_POST_MORTEM, LISTEN_ROLES, LISTEN_RANKS, PROFILE,
                   CUDA_MEMORY_SNAPSHOT, DEBUG_ALLOW_REMOTE, ON_NONFINITE, FAILURES_DIR)

# The driver's side:
WAIT_REPORT_S = "RLDBG_WAIT_REPORT_S"        # seconds before a slow call names the ranks it waits for (5)
HANG_REPORT_S = "RLDBG_HANG_REPORT_S"        # seconds before a slow call's stacks are read as a hang (60)
TRACE_HOST = "RLDBG_TRACE_HOST"              # the address the trace collector listens on

# VeRL's zero-code switch (rldbg.integrations.verl), read in every process of a VeRL job:
VERL = "RLDBG_VERL"                          # "1": load the integration (rldbg_verl_plugin.py)
VERL_ROLE = "RLDBG_VERL_ROLE"                # a worker's role(s), set by the driver through VeRL's worker env
TRACE = "RLDBG_TRACE"                        # the trace's path, or 1 for the default
TRACE_WINDOW = "RLDBG_TRACE_WINDOW"          # the flight recorder's last N steps
TRACE_STEPS = "RLDBG_TRACE_STEPS"            # step windows to record, "100-110,500"

# The tools' side (rldbg top, rldbg breakpoints ...):
HOME = "RLDBG_HOME"                          # where hub files live (default ~/.rldbg)
TOKEN = "RLDBG_TOKEN"                        # the control hub's bearer token for `rldbg top`
