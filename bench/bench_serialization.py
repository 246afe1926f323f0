"""Is a DP_COMPUTE_PROTO call through the reference trainer's WorkerGroup faster than raw Ray?

Run on demand (not a test):  python bench/bench_serialization.py [--rounds 60] [--blocks 4]

Starts a local 2-CPU Ray cluster bound to 127.0.0.1, builds a 384 KiB batch and times, per round trip:
  (a)   raw Ray: one actor echoes a plain dict of the batch's torch tensors (the baseline);
  (wg)  the real WorkerGroup (reference_trainer.single_controller, rldbg hooks included) calling a
        DP_COMPUTE_PROTO echo over 2 ranks: split, ship, run, ship back, concatenate, sentinel check;
  (wg+) the same with tracing on (rldbg.trace.start ... stop around the block).
Blocks alternate off / on; within a block (a) and (wg) rounds interleave, so a slow stretch on a shared
machine hits both alike. It prints medians and (wg)/(a) per tracing state beside the goal (≤ 0.80),
plus reference figures: the fixed cost of one actor call, the floor for these bytes (one
numpy array), a DataProto echo on one actor, and the pickle payload of a DataProto.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import statistics
import tempfile
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import numpy as np  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402

import rldbg  # noqa: E402
from results import SAVE_HELP, save  # noqa: E402
from reference_trainer.protocol import DataProto  # noqa: E402
from reference_trainer.single_controller import (  # noqa: E402
    Dispatch, ResourcePool, Worker, register, shutdown_groups, spawn_role_groups,
)

ROWS, SEQ = 64, 48
GOAL = 0.80


def make_batch() -> DataProto:
    g = torch.Generator().manual_seed(0)
    tensors = {
        "input_ids": torch.randint(0, 32000, (ROWS, SEQ), generator=g),            # int64  24 KiB
        "position_ids": torch.arange(SEQ).repeat(ROWS, 1),                         # int64  24 KiB
        "attention_mask": torch.ones(ROWS, SEQ, dtype=torch.int64),                # int64  24 KiB
        "response_mask": torch.ones(ROWS, SEQ),                                    # fp32   12 KiB
        "old_logp": torch.randn(ROWS, SEQ, generator=g),                           # fp32   12 KiB
        "ref_logp": torch.randn(ROWS, SEQ, generator=g),                           # fp32   12 KiB
        "values": torch.randn(ROWS, SEQ, generator=g),                             # fp32   12 KiB
        "advantages": torch.randn(ROWS, SEQ, generator=g),                         # fp32   12 KiB
        "returns": torch.randn(ROWS, SEQ, generator=g),                            # fp32   12 KiB
        "token_rewards": torch.randn(ROWS, SEQ, generator=g),                      # fp32   12 KiB
        "hidden_summary": torch.randn(ROWS, 16 * SEQ, generator=g).bfloat16(),     # bf16   96 KiB
        "logits_topk": torch.randn(ROWS, 4 * SEQ, generator=g),                    # fp32   48 KiB
        "rollout_logp": torch.randn(ROWS, 2 * SEQ, generator=g),                   # fp32   24 KiB
        "kl": torch.randn(ROWS, 2 * SEQ, generator=g),                             # fp32   24 KiB
        "entropy": torch.randn(ROWS, 2 * SEQ, generator=g),                        # fp32   24 KiB
        "token_level_scores": torch.randn(ROWS, SEQ, generator=g),                 # fp32   12 KiB
    }
    return DataProto.from_dict(tensors, meta={"step": 0})


@ray.remote(num_cpus=0)
class Echo:
    def echo(self, x):
        return x


class EchoWorker(Worker):
    """A role whose registered method returns its shard as is: the call is pure dispatch."""

    role = "echo"

    @register(Dispatch.DP_COMPUTE_PROTO)
    def echo(self, batch: DataProto) -> DataProto:
        return batch


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="round trips per case per block")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per tracing state (off/on alternate)")
    parser.add_argument("--save", action="store_true", help=SAVE_HELP)
    args = parser.parse_args()
    if args.rounds < 1 or args.blocks < 1:
        parser.error(f"--rounds {args.rounds} and --blocks {args.blocks} must both be >= 1")

    batch = make_batch()
    plain = dict(batch.tensors)
    print(f"batch: {len(batch)} rows, {len(plain)} tensors, {batch.nbytes / 1024:.0f} KiB; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=True)
    tmp = tempfile.mkdtemp(prefix="rldbg-bench-ser-")
    groups = None
    try:
        a1 = Echo.remote()
        groups = spawn_role_groups(ResourcePool("bench", 2, cpus_per_rank=0.5), {"echo": (EchoWorker, None)},
                                   run_name="bench_ser")
        wg = groups["echo"]

        def run_a():
            out = ray.get(a1.echo.remote(plain))
            assert out["input_ids"].shape == (ROWS, SEQ)

        def run_wg():
            out = wg.echo(batch)
            assert len(out) == ROWS

        def run_0():
            ray.get(a1.echo.remote(None))

        raw = np.zeros(batch.nbytes, dtype=np.uint8)

        def run_raw():
            ray.get(a1.echo.remote(raw))

        def run_b():
            assert len(ray.get(a1.echo.remote(batch))) == ROWS

        for _ in range(10):   # warm up workers, imports and the object store
            run_a(), run_wg()
        out = wg.echo(batch)
        assert all(torch.equal(out.tensors[k], t) for k, t in batch.tensors.items()), "the echo changed the batch"

        times = {k: [] for k in ("a_off", "wg_off", "a_on", "wg_on", "0", "raw", "b")}
        for block in range(args.blocks):
            for state in ("off", "on"):
                if state == "on":
                    rldbg.trace.start(os.path.join(tmp, f"b{block}.json"), memory_hz=10.0)
                try:
                    for _ in range(10 if state == "on" else 0):   # tracing found by the ranks
                        run_wg()
                    for _ in range(args.rounds):
                        times[f"a_{state}"].append(timed(run_a))
                        times[f"wg_{state}"].append(timed(run_wg))
                        if state == "off":
                            for k, fn in (("0", run_0), ("raw", run_raw), ("b", run_b)):
                                times[k].append(timed(fn))
                finally:
                    if state == "on":
                        shutil.rmtree(rldbg.trace.stop(export=False) or "", ignore_errors=True)
        ms = {k: median_ms(v) for k, v in times.items()}
        n = args.rounds * args.blocks
        print(f"medians of {n} round trips per case, {args.blocks} alternating blocks per tracing state:")
        print(f"    empty actor echo (fixed cost of a call)       : {ms['0']:.3f} ms")
        print(f"    one 384 KiB numpy array, actor echo             : {ms['raw']:.3f} ms   (the floor for these bytes)")
        print(f"    DataProto, one actor echo                       : {ms['b']:.3f} ms")
        for state, label in (("off", "tracing off"), ("on", "tracing on (memory sampling 10 Hz)")):
            ratio = ms[f"wg_{state}"] / ms[f"a_{state}"]
            verdict = "meets" if ratio <= GOAL else "misses"
            print(f"{label}:")
            print(f"    (a)  raw Ray dict-of-tensors echo, 1 actor      : {ms[f'a_{state}']:.3f} ms")
            print(f"    (wg) WorkerGroup DP_COMPUTE_PROTO echo, 2 ranks : {ms[f'wg_{state}']:.3f} ms   "
                  f"(wg)/(a) = {ratio:.2f}   goal <= {GOAL:.2f}: {verdict}")

        oob: list = []
        data = pickle.dumps(batch, protocol=5, buffer_callback=oob.append)
        print(f"pickle protocol 5 of the DataProto: {len(data) / 1024:.1f} KiB in-band + "
              f"{sum(memoryview(b).nbytes for b in oob) / 1024:.1f} KiB out-of-band in {len(oob)} buffers")
        if args.save:
            names = {"0": "empty_echo", "raw": "numpy_echo", "b": "dataproto_one_actor"}
            figures = {f"{names.get(k, k)}_ms": round(v, 3) for k, v in ms.items()}
            figures.update({f"{s}_wg_over_a": round(ms[f"wg_{s}"] / ms[f"a_{s}"], 2) for s in ("off", "on")})
            save("bench_serialization", args, figures, goal=f"(wg)/(a) <= {GOAL:.2f}")
    finally:
        if groups:
            shutdown_groups(groups.values())
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
