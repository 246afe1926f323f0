"""The debugger against the real trainer: a breakpoint spec pauses one rank of the actor
group, a DAP client inspects and continues, the step completes; post-mortem on an injected
error; a client that disconnects without continuing lets the run finish."""
from __future__ import annotations

import io
import json
import threading
from contextlib import redirect_stdout

import pytest
from polling import until
import torch

from reference_trainer.config import load_config
from reference_trainer.data import PromptSource
from reference_trainer.protocol import DataProto
from reference_trainer.roles import build_role_groups
from reference_trainer.single_controller import RemoteCallError, shutdown_groups
from reference_trainer.tasks import build_tokenizer, get_task
from reference_trainer.trainer import train_step, worker_env
from rldbg.cli import main as cli_main
from rldbg.dashboard import Dashboard
from rldbg.debug.dap import DAPClient
from rldbg.debug.paused_workers import list_paused

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)


def _until(fn, what, limit=120.0):
    return until(fn, what, limit)


def _groups(tmp_path, *extra):
    cfg = load_config("demo", overrides=[
        f"trainer.run_dir={tmp_path}", "trace.enabled=false", "sft.steps=0", "trainer.progress=false",
        "data.prompts_per_step=4", "data.group_size=2", "actor.mini_batch_size=8", "critic.mini_batch_size=8",
        "actor.micro_batch_size=4", "critic.micro_batch_size=4",
        *extra])
    groups = build_role_groups(cfg, worker_env(cfg))
    for g in groups.values():
        g.init_model()
    return cfg, groups


def _step_in_thread(cfg, groups):
    src = PromptSource(get_task(cfg.data.task), build_tokenizer(), cfg.data.prompts_per_step, cfg.data.group_size, 0)
    out: dict = {}

    def run():
        try:
            out["record"] = train_step(0, src.batch(0), groups["actor"], None, groups["reward"], cfg)
        except BaseException as e:  # surfaced by the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _paused_list(address):
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli_main(["breakpoints", "--address", address, "--json"]) == 0
    return json.loads(buf.getvalue())


def test_spec_pauses_rank1_only_inspect_continue(ray_cluster, tmp_path):
    cfg, groups = _groups(tmp_path, 'debug.breakpoints=["actor.compute_ref_log_prob@rank=1,step=0"]')
    try:
        thread, out = _step_in_thread(cfg, groups)
        dash = Dashboard(ray_cluster)
        paused = _until(lambda: list_paused(dash), "rank 1 paused")
        listed = _paused_list(ray_cluster)
        assert [(w["rank"], w["method"]) for w in listed] == [(1, "actor__compute_ref_log_prob")]
        assert "actor" in listed[0]["role"].split("+")

        client = DAPClient(paused[0].host, paused[0].port)
        client.attach()
        assert client.wait_stopped(60)["reason"] == "breakpoint"
        top = client.stack_trace()[0]
        assert top["source"]["path"].endswith("single_controller/host.py") and top["name"] == "actor__compute_ref_log_prob"
        # 8 rows over 2 ranks: this shard holds 4
        assert client.evaluate("len(args[0])", top["id"])["result"] == "4"
        assert client.evaluate("method", top["id"])["result"] == "'compute_ref_log_prob'"
        client.resume()
        client.disconnect()

        thread.join(180)
        assert "error" not in out, out.get("error")
        rec = out["record"]
        assert 0.0 <= rec["reward/mean"] <= 1.0 and "actor/pg_loss" in rec and "time/update_actor" in rec
        sums = groups["actor"].weights_checksum()
        assert sums[0] == pytest.approx(sums[1], abs=1e-9)
        _until(lambda: _paused_list(ray_cluster) == [], "no paused workers")
    finally:
        shutdown_groups(groups.values())


def test_disconnect_without_continue_lets_the_step_finish(ray_cluster, tmp_path):
    cfg, groups = _groups(tmp_path, 'debug.breakpoints=["actor.update_actor@rank=0"]')
    try:
        thread, out = _step_in_thread(cfg, groups)
        paused = _until(lambda: list_paused(Dashboard(ray_cluster)), "rank 0 paused")
        client = DAPClient(paused[0].host, paused[0].port)
        client.attach()
        client.wait_stopped(60)
        client.disconnect()  # no continue
        thread.join(180)
        assert "error" not in out and "record" in out
    finally:
        shutdown_groups(groups.values())


def test_post_mortem_pauses_at_the_raising_frame(ray_cluster, tmp_path):
    cfg, groups = _groups(tmp_path, "debug.post_mortem=true")
    try:
        bad = DataProto.from_dict(tensors={"input_ids": torch.ones(4, 3, dtype=torch.long)})  # no "responses"
        box: dict = {}
        t = threading.Thread(target=lambda: box.setdefault("err", _raises(groups["actor"].compute_log_prob, bad)))
        t.start()
        paused = _until(lambda: list_paused(Dashboard(ray_cluster)), "post-mortem pause")
        client = DAPClient(paused[0].host, paused[0].port)
        client.attach(exception_filters=["uncaught"])
        client.wait_stopped(60)
        frames = client.stack_trace()
        assert frames[0]["source"]["path"].endswith("workers/hybrid.py")
        assert client.evaluate("len(batch)", frames[0]["id"])["result"] in ("2", "4")
        client.resume()
        client.disconnect()
        t.join(120)
        err = box["err"]
        assert isinstance(err, RemoteCallError) and err.role == "actor" and err.method == "compute_log_prob"
        assert "KeyError" in str(err) and "hybrid.py" in err.remote_traceback
    finally:
        shutdown_groups(groups.values())


def _raises(fn, *args):
    try:
        fn(*args)
    except BaseException as e:
        return e
    return None
