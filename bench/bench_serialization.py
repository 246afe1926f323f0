"""How fast does a DataProto cross a Ray actor boundary, compared with a plain dict of torch tensors?

Run on demand (not a test):  python bench/bench_serialization.py [--rounds 200]

Starts a local 2-CPU Ray cluster bound to 127.0.0.1, builds a 384 KiB batch and prints the median
round-trip time of
  (a) an actor echo of a plain dict of the same torch tensors,
  (b) an actor echo of the DataProto,
  (c) the DataProto chunked in 2, echoed by 2 actors in parallel, then concatenated,
plus (b)/(a) and (c)/(a); for reference also (0), an echo of None (the fixed cost of one actor call),
and an echo of one numpy array of the same size (the floor for moving these bytes). Rounds
interleave the cases so a slow stretch on a shared machine hits all of them alike. It also reports
pickle payload sizes and what copying read-only object-store buffers on arrival costs.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import numpy as np  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402

from reference_trainer.protocol import DataProto  # noqa: E402

ROWS, SEQ = 64, 48


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


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()

    batch = make_batch()
    plain = dict(batch.tensors)
    print(f"batch: {len(batch)} rows, {len(plain)} tensors, {batch.nbytes / 1024:.0f} KiB")

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=True)
    try:
        a1, a2 = Echo.remote(), Echo.remote()
        ray.get([a1.echo.remote(0), a2.echo.remote(0)])

        def run_a():
            out = ray.get(a1.echo.remote(plain))
            assert out["input_ids"].shape == (ROWS, SEQ)

        def run_b():
            out = ray.get(a1.echo.remote(batch))
            assert len(out) == ROWS

        def run_c():
            c0, c1 = batch.chunk(2)
            out = DataProto.concat(ray.get([a1.echo.remote(c0), a2.echo.remote(c1)]))
            assert len(out) == ROWS

        def run_0():  # the fixed cost of one actor call, to read the figures against
            ray.get(a1.echo.remote(None))

        raw = np.zeros(batch.nbytes, dtype=np.uint8)

        def run_raw():  # the floor for moving these bytes: one numpy array, Ray's own zero-copy path
            ray.get(a1.echo.remote(raw))

        cases = {"0": run_0, "raw": run_raw, "a": run_a, "b": run_b, "c": run_c}
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(10):  # warm up workers, imports and the object store
            for fn in cases.values():
                fn()
        for _ in range(args.rounds):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        ms = {k: median_ms(v) for k, v in times.items()}
        print(f"(0) empty actor echo (fixed call cost)     : {ms['0']:.3f} ms")
        print(f"    one 384 KiB numpy array, actor echo      : {ms['raw']:.3f} ms   (the floor for these bytes)")
        print(f"(a) plain dict of torch tensors, actor echo : {ms['a']:.3f} ms")
        print(f"(b) DataProto, actor echo                    : {ms['b']:.3f} ms   (b)/(a) = {ms['b'] / ms['a']:.2f}")
        print(f"(c) DataProto chunk(2) -> 2 actors -> concat : {ms['c']:.3f} ms   (c)/(a) = {ms['c'] / ms['a']:.2f}")

        # Payload sizes and where the time goes, without Ray.
        for label, obj in (("plain dict", plain), ("DataProto", batch)):
            oob: list = []
            t0 = time.perf_counter()
            for _ in range(50):
                oob = []
                data = pickle.dumps(obj, protocol=5, buffer_callback=oob.append)
            dt = (time.perf_counter() - t0) / 50
            print(f"pickle protocol 5, {label:10s}: {len(data) / 1024:7.1f} KiB in-band + "
                  f"{sum(memoryview(b).nbytes for b in oob) / 1024:6.1f} KiB out-of-band, dumps {dt * 1e3:.3f} ms")

        # The cost of making arrived tensors writable: ray.get of a stored batch copies its read-only buffers.
        ref = ray.put(batch)
        stored_arrays = ray.get(ray.put({k: t.numpy() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy()
                                         for k, t in batch.tensors.items()}))
        writable = all(a.flags.writeable for a in stored_arrays.values())
        get_b = [0.0] * 100
        copy_t = [0.0] * 100
        for i in range(100):
            t0 = time.perf_counter()
            ray.get(ref)
            get_b[i] = time.perf_counter() - t0
            t0 = time.perf_counter()
            for a in stored_arrays.values():
                a.copy()
            copy_t[i] = time.perf_counter() - t0
        print(f"object-store arrays writable on arrival: {writable}; ray.get(DataProto) {median_ms(get_b):.3f} ms, "
              f"of which copying {len(stored_arrays)} read-only arrays ≈ {median_ms(copy_t):.3f} ms")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
