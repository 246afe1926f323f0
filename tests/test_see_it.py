"""Where users look: `rldbg open` hands a real trainer trace to the Perfetto UI the way the UI fetches
it, `rldbg report --html` draws in headless Chromium, and the trainer's metrics reach TensorBoard
(and wandb, offline) — every command run as a subprocess, as a user runs it."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.error
import urllib.request

import pytest

from polling import until
from reference_trainer.config import load_config
from reference_trainer.trainer import fit

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

UI = "https://ui.perfetto.dev"
# What the UI's fetch() sends cross-origin from ui.perfetto.dev (Chrome).
UI_HEADERS = {"Origin": UI, "Referer": UI + "/", "Accept": "*/*", "Sec-Fetch-Mode": "cors",
              "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "empty",
              "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0 Safari/537.36"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    run = tmp_path_factory.mktemp("seeit")
    cfg = load_config("demo", overrides=[
        f"trainer.run_dir={run}", "trainer.total_steps=3", "trainer.progress=false", "sft.steps=0",
        "trace.enabled=true", "control.enabled=false", "model.preset=llama-small",
        "trainer.logger=[console,jsonl,tensorboard]",
        "data.prompts_per_step=4", "data.group_size=4", "actor.mini_batch_size=16", "actor.micro_batch_size=8"])
    fit(cfg)
    return run


def _rldbg(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "rldbg", *args], capture_output=True, text=True,
                          timeout=120, env=env, **kw)


def _request(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_open_serves_the_trace_once_to_the_perfetto_ui(run):
    trace = run / "trace.json.gz"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    proc = subprocess.Popen([sys.executable, "-m", "rldbg", "open", str(trace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        text = until(lambda: "".join(out) if "serving " in "".join(out) else None, what="rldbg open's link", limit=30)
        url = re.search(r"https://ui\.perfetto\.dev/#!/\?url=(http://127\.0\.0\.1:9001/[^&\s]+)", text).group(1)
        assert url.endswith("/trace.json.gz")
        assert "ssh -L 9001:127.0.0.1:9001" in text, text   # headless here: the hint for a laptop browser

        # Only our one file, only to the UI's origin.
        assert _request(url.rsplit("/", 1)[0] + "/etc/passwd")[0] == 404
        status, _, _ = _request(url, headers={**UI_HEADERS, "Origin": "https://evil.example"})
        assert status == 403
        # Chrome's CORS + Private Network Access preflight from a public page to loopback.
        status, h, _ = _request(url, "OPTIONS", {"Origin": UI, "Access-Control-Request-Method": "GET",
                                                 "Access-Control-Request-Private-Network": "true"})
        assert status == 204
        assert h["Access-Control-Allow-Origin"] == UI and h["Access-Control-Allow-Private-Network"] == "true"
        assert proc.poll() is None, "the server must still wait for the real fetch"

        status, h, body = _request(url, headers=UI_HEADERS)
        assert status == 200 and h["Access-Control-Allow-Origin"] == UI
        assert body == trace.read_bytes()
        assert proc.wait(timeout=15) == 0
        reader.join(timeout=5)
        assert "trace sent to the UI" in "".join(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_open_bad_inputs_fail_in_one_line(tmp_path):
    r = _rldbg("open", str(tmp_path / "missing.json.gz"), "--no-browser")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "missing.json.gz" in r.stderr
    r = _rldbg("open", str(tmp_path), "--no-browser", "--port", "70000")
    assert r.returncode == 2 and "70000" in r.stderr and "0-65535" in r.stderr
    # What the UI cannot read is not served: a store, a spill (exported first), a wrong timeout.
    (tmp_path / "trace.rldbg.db").write_bytes(b"SQLite format 3\x00")
    (tmp_path / "trace.spill").mkdir()
    (tmp_path / "trace.spill" / "meta.json").write_text("{}")
    spill = tmp_path / "trace.spill"
    for args, said in [((str(tmp_path / "trace.rldbg.db"),), "not a trace the Perfetto UI reads (.json, .json.gz"),
                       ((str(spill),), f"`rldbg export {spill} -o trace.json.gz`"),
                       ((str(tmp_path), "--timeout", "nan"), "--timeout nan must be > 0 seconds")]:
        r = _rldbg("open", *args, "--no-browser")
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and said in r.stderr, r.stderr


def _chromium(*args):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_report_draws_every_chart_in_chromium(run, tmp_path):
    assert CHROMIUM, "Debian's chromium is missing (.ci/run installs it: apt-get install chromium)"
    out = tmp_path / "report.html"
    r = _rldbg("report", str(run / "trace.json.gz"), "--html", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page must not need the network"
    for section in ("step-time", "controller-idle", "skew", "memory", "ledger-actor-0", "ledger-actor-1"):
        assert f"id='{section}'" in page, section

    dom = _chromium("--dump-dom", out.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") >= 6
    # pygal draws one <path class="line ..."> per series and <rect class="rect reactive ..."> per bar.
    assert re.search(r'class="line', dom.stdout) and re.search(r'class="rect reactive', dom.stdout)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console

    png = tmp_path / "report.png"
    shot = _chromium("--window-size=1000,3000", f"--screenshot={png}", out.as_uri())
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    from PIL import Image
    img = Image.open(png).convert("L")
    dark = sum(img.histogram()[:200])
    assert dark > 0.01 * img.width * img.height, "screenshot is (nearly) blank"


def test_trainer_scalars_reach_tensorboard(run):
    from rldbg.profilers.tensorboard import free_port, get_json
    assert list((run / "tb" / "metrics").glob("*.tfevents.*"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rldbg", "tb", "--logdir", str(run / "tb"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"

        def tags():
            try:
                return get_json(base + "/data/plugin/scalars/tags").get("metrics")
            except (urllib.error.URLError, OSError, ValueError):
                return None
        got = until(lambda: (t := tags()) and "reward/mean" in t and t, what="the metrics run", limit=90)
        assert {"reward/mean", "time/step", "grad_norm"} <= set(got)
        q = urllib.parse.urlencode({"run": "metrics", "tag": "reward/mean"})
        points = get_json(f"{base}/data/plugin/scalars/scalars?{q}")
        steps = [p[1] for p in points]
        want = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == want
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # `rldbg tb` takes its TensorBoard child down with it on SIGTERM.
    import psutil
    until(lambda: not [p for p in psutil.process_iter(["cmdline"])
                       if str(run / "tb") in " ".join(p.info["cmdline"] or [])], what="TensorBoard to exit", limit=30)


def test_wandb_offline_run_gets_the_metrics(tmp_path):
    pytest.importorskip("wandb")
    script = ("from reference_trainer.metrics_log import MetricsLog\n"
              f"log = MetricsLog({str(tmp_path)!r}, 2, 0, False, ['jsonl', 'wandb'], config={{'a': 1}})\n"
              "for s in range(2):\n"
              "    log.write({'step': s, 'reward/mean': 0.5 + s, 'tokens': 10})\n"
              "log.close()\n")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert runs and runs[0].stat().st_size > 0, (list(tmp_path.rglob("*")), time.monotonic() - t0)
