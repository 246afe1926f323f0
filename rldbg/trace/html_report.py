"""`rldbg report TRACE --html OUT`: the report's facts drawn on one self-contained page.

Charts are SVG made by pygal (pure Python, no dependencies, maintained) with its JavaScript
switched off, inlined into the page: nothing is fetched when the page is viewed, so the file can
be mailed, attached to an issue or opened on an air-gapped machine. The facts come from the same
analysis as the text report (`report.analyse_trace`); only the series over time are gathered here.
"""
from __future__ import annotations

import html
from collections import defaultdict

from rldbg.analysis import transitions as transition_analysis
from rldbg.analysis.cover import Cover
from rldbg.analysis.stragglers import by_call
from rldbg.trace.report import Trace, analyse_trace, mib_text

MAX_POINTS = 500      # per series: keeps the page small and quick for long runs
MAX_RANK_CHARTS = 8   # ledger charts; more ranks are summarised in the memory chart
STRAGGLER = "#d62728"


def _chart(cls, title: str, **kw):
    import pygal.style
    style = pygal.style.Style(background="white", plot_background="white", foreground="#333",
                              foreground_strong="#111", foreground_subtle="#666", opacity=".8",
                              opacity_hover=".95", font_family="sans-serif",
                              colors=("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                                      "#7f7f7f", "#bcbd22", "#17becf", "#d62728"))
    # js=() drops pygal's default <script> from a CDN: the page must not need the network.
    opts = dict(style=style, js=(), disable_xml_declaration=True, width=900, height=360, explicit_size=True,
                legend_at_bottom=True, truncate_legend=40, truncate_label=-1, print_values=False)
    return cls(title=title, **{**opts, **kw})


def _thin(points: list, n: int = MAX_POINTS) -> list:
    if len(points) <= n:
        return points
    stride = len(points) / n
    return [points[int(i * stride)] for i in range(n)] + [points[-1]]


def _step_role_time(t: Trace) -> tuple[list, dict, list]:
    """(step labels, {role: [busy s per step]}, [controller idle s per step])."""
    by_role = defaultdict(list)
    for c in t.calls:
        by_role[c["role"]].append((c["ts"], c["end"]))
    covers = {r: Cover(iv) for r, iv in sorted(by_role.items())}
    drv = Cover([(d["ts"], d["end"]) for d in t.driver_calls])
    labels, busy, idle = [], {r: [] for r in covers}, []
    for s in sorted(t.steps, key=lambda s: s["ts"]):
        labels.append(str(s["step"] if s["step"] is not None else len(labels)))
        for r in covers:
            busy[r].append(covers[r].within(s["ts"], s["end"]) / 1e9)
        idle.append((s["dur"] - drv.within(s["ts"], s["end"])) / 1e9)
    return labels, busy, idle


def _method_rank_means(t: Trace) -> dict:
    """{(role, method): {rank: mean seconds}} over calls with a flow (a driver call)."""
    acc = defaultdict(lambda: defaultdict(list))
    for c in t.calls:
        if c["flow"] is not None:
            acc[(c["role"], c["method"])][c["rank"]].append(c["dur"] / 1e9)
    return {k: {r: sum(v) / len(v) for r, v in sorted(ranks.items())} for k, ranks in sorted(acc.items(), key=by_call)}


def _origin(t: Trace) -> int:
    starts = [s["ts"] for s in t.calls + t.transitions + t.driver_calls + t.steps]
    starts += [times[0] for times, _ in list(t.mem.values()) + list(t.ledger.values()) if times]
    return min(starts) if starts else 0


def charts(t: Trace, r: dict) -> list[tuple[str, str, str]]:
    """[(section id, title, svg markup)] for every chart the page shows."""
    import pygal
    out = []
    t0 = _origin(t)

    labels, busy, idle = _step_role_time(t)
    if labels:
        per_step = dict(x_title="step", x_labels=labels, show_minor_x_labels=False,
                        x_labels_major_every=max(1, len(labels) // 15))
        c = _chart(pygal.StackedBar, "Busy time per role in each step (s)", **per_step)
        for role, vals in busy.items():
            c.add(role, vals)
        out.append(("step-time", "Step time by role", c.render(is_unicode=True)))
        c = _chart(pygal.Line, "Controller idle in each step (s): time no worker-group call was running",
                   show_dots=len(labels) < 60, **per_step)
        c.add("controller idle", idle)
        out.append(("controller-idle", "Controller idle", c.render(is_unicode=True)))

    slow = {(s["role"], s["method"], s["rank"]) for s in r.get("stragglers", [])}
    if means := _method_rank_means(t):
        ranks = sorted({rk for v in means.values() for rk in v})
        c = _chart(pygal.HorizontalBar, "Mean call time per rank (s); stragglers in red",
                   height=max(360, 28 * len(means) * max(1, min(len(ranks), 8)) // 2))
        c.x_labels = [f"{role}.{m}" for role, m in means]
        for rank in ranks[:16]:
            c.add(f"rank {rank}", [
                ({"value": v[rank], "color": STRAGGLER, "label": "straggler"} if (role, m, rank) in slow else v[rank])
                if rank in v else None for (role, m), v in means.items()])
        out.append(("skew", "Per-rank time per method", c.render(is_unicode=True)))

    if lanes := sorted({(role, rank) for role, rank, _ in t.mem}):
        c = _chart(pygal.XY, "Memory per rank over time (MiB); dots: transitions (memory after)",
                   x_title="seconds since the first event", show_dots=False, stroke=True, height=420)
        for role, rank in lanes:
            if pts := [((ts - t0) / 1e9, v / 2**20) for ts, v in zip(*t.mem_series(role, rank))]:
                c.add(f"{role} rank {rank}", _thin(pts))
        marks = defaultdict(list)
        for s in t.transitions:
            if (after := s["args"].get("mem_after")) is not None:
                marks[s["name"]].append(((s["end"] - t0) / 1e9, after / 2**20))
        for name, pts in sorted(marks.items()):
            c.add(f"▲ {name}", _thin(sorted(pts)), stroke=False, show_dots=True, dots_size=4)
        out.append(("memory", "Memory per rank", c.render(is_unicode=True)))

    ledger_lanes = sorted({(role, rank) for role, rank, _ in t.ledger})
    for role, rank in ledger_lanes[:MAX_RANK_CHARTS]:
        c = _chart(pygal.XY, f"Ledger: bytes held by category, {role} rank {rank} (MiB)",
                   x_title="seconds since the first event", show_dots=False, height=300)
        for (rl, rk, cat), series in sorted(t.ledger.items()):
            if (rl, rk) == (role, rank):
                # A ledger value holds until the next one: draw it as steps.
                pts = []
                for ts, v in zip(*series):
                    x = (ts - t0) / 1e9
                    if pts:
                        pts.append((x, pts[-1][1]))
                    pts.append((x, v / 2**20))
                c.add(cat, _thin(pts))
        out.append((f"ledger-{role}-{rank}", f"Ledger {role} rank {rank}", c.render(is_unicode=True)))
    return out


def _table(rows: list[dict], cols: list[tuple[str, str]], empty: str, cls: str = "") -> str:
    if not rows:
        return f'<p class="none">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _ in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(row.get(k, '')))}</td>" for _, k in cols) + "</tr>"
                   for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _leak_rows(leaks: list[dict]) -> list[dict]:
    rows = []
    for k in leaks:
        what = k.get("category") or k.get("transition") or k.get("kind", "")
        amount = k.get("bytes_per_cycle", k.get("grew_bytes", k.get("bytes")))
        detail = ", ".join(f"{a.replace('_', ' ')} {mib_text(b) if a.endswith('bytes') else b}" for a, b in k.items()
                           if a not in ("role", "rank", "category", "transition", "kind"))
        rows.append({"role": k.get("role"), "rank": k.get("rank"), "what": what,
                     "amount": mib_text(amount) if isinstance(amount, (int, float)) else "", "detail": detail})
    return rows


def _transition_rows(rows: list[dict]) -> list[dict]:
    mib = transition_analysis.fmt_mib
    out = []
    for r in rows:
        ledger = -r["ledger_freed"] if r["declared"]["frees"] else r["ledger_loaded"]
        gpu = r["device"] == "cuda"
        out.append({"role": r["role"], "rank": r["rank"], "transition": r["transition"], "cycles": r["cycles"],
                    "ledger": mib(ledger), "alloc": mib(r["allocated_delta"]), "reserved": mib(r["reserved_delta"]),
                    "device": mib(r["device_delta"] if gpu else r["rss_delta"]),
                    "verdict": f"{r['verdict']}: {r['cause']}" if r["verdict"] else ""})
    return out


CSS = """
body{font-family:sans-serif;margin:24px auto;max-width:960px;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ddd;padding:3px 8px;font-size:.9em}
th{background:#f4f4f4} .alarm td{background:#fde8e8} .none{color:#2a7;font-weight:bold}
.facts span{display:inline-block;margin-right:2em} figure{margin:0} nav a{margin-right:1em}
"""


def render_html(path: str, analysed: tuple | None = None) -> str:
    """The page for the trace at `path`; `analysed`: analyse_trace(path)'s result when at hand."""
    r, t = analysed or analyse_trace(path)   # the charts come from the analysis's own Trace
    figs = charts(t, r)
    tm, ctl = r["time"], r["controller"]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>rldbg report</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>rldbg report</h1><p><code>{html.escape(str(path))}</code></p>",
             "<p class='facts'>"
             f"<span>step time <b>{tm['step_time_s']:.3f} s</b> over {tm['steps']} step(s)</span>"
             f"<span>controller idle <b>{ctl['idle_share'] * 100:.1f}%</b> ({ctl['idle_s']:.3f} s)</span>"
             f"<span>stragglers <b>{len(r['stragglers'])}</b></span>"
             f"<span>leak suspicions <b>{len(r['leaks'])}</b></span></p>",
             "<nav>" + "".join(f"<a href='#{sid}'>{html.escape(title)}</a>" for sid, title, _ in figs) + "</nav>"]
    roles = [{"role": k, "share": f"{v['share'] * 100:.1f}%", "busy": f"{v['busy_s']:.3f} s"}
             for k, v in tm["roles"].items()]
    parts.append("<h2>Time per role</h2>" + _table(roles, [("role", "role"), ("share of step time", "share"),
                                                           ("busy", "busy")], "no worker calls"))
    parts.append("<h2>Stragglers</h2>" + _table(
        r["stragglers"], [("role", "role"), ("rank", "rank"), ("method", "method"),
                          ("× median of peers", "slower_than_peers"), ("calls", "calls")],
        "none: no rank is consistently slower than its peers", "alarm"))
    if r.get("breakpoint_stops"):
        parts.append(f"<h2>Breakpoint stops</h2><p>{r['calls_paused']} call(s) paused at these, left out of the "
                     "skew; the step times include the pauses.</p>" + _table(r["breakpoint_stops"], [
                         (k, k) for k in ("role", "rank", "step", "method", "file", "line", "reason")], ""))
    parts.append("<h2>Leak suspicions</h2>" + _table(
        _leak_rows(r["leaks"]), [("role", "role"), ("rank", "rank"), ("category / transition", "what"),
                                 ("amount", "amount"), ("detail", "detail")], "none", "alarm"))
    parts.append("<h2>Memory not returned</h2>" + _table(
        [{"what": transition_analysis.describe(f)} for f in r.get("not_returned") or []],
        [("finding", "what")], "none: every freeing transition gave its bytes back", "alarm"))
    parts.append("<h2>Memory by transition</h2>" + _table(
        _transition_rows(r.get("transitions") or []),
        [("role", "role"), ("rank", "rank"), ("transition [ledger categories]", "transition"), ("cycles", "cycles"),
         ("ledger", "ledger"), ("allocated", "alloc"), ("reserved", "reserved"), ("device / RSS", "device"),
         ("verdict", "verdict")], "no transition declares frees/loads"))
    gpu_rows = [{"gpu": g["gpu"], "pid": p["pid"], "who": p["who"] or "not a rank of this job",
                 "peak": mib_text(p["peak_bytes"]), "last": mib_text(p["last_bytes"])}
                for g in r.get("gpus") or [] for p in g["processes"]]
    if gpu_rows:
        parts.append("<h2>GPU memory by process</h2>" + _table(
            gpu_rows, [("GPU", "gpu"), ("pid", "pid"), ("process", "who"), ("peak", "peak"), ("last", "last")], ""))
    parts.append("<h2>Non-finite values</h2>" + _table(
        r["nonfinite"], [("role", "role"), ("rank", "rank"), ("method", "method"), ("step", "step"),
                             ("output key", "key"), ("elements", "count")], "none recorded", "alarm"))
    gaps = [{"idle": f"{g['idle_s'] * 1e3:.1f} ms", "after": g["after"], "before": g["before"], "step": g["step"]}
            for g in ctl["largest_gaps"]]
    parts.append("<h2>Largest controller gaps</h2>" + _table(
        gaps, [("idle", "idle"), ("after", "after"), ("before", "before"), ("step", "step")], "none"))
    for sid, title, svg in figs:
        parts.append(f"<h2 id='{sid}'>{html.escape(title)}</h2><figure class='chart'>{svg}</figure>")
    peaks = [{"role": p["role"], "phase": p["phase"], "peak": mib_text(p["peak_bytes"]), "rank": p["rank"]}
             for p in r["memory_peaks"]]
    parts.append("<h2>Memory peak per phase</h2>" + _table(
        peaks, [("role", "role"), ("phase", "phase"), ("peak", "peak"), ("rank", "rank")], "no memory samples"))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(path: str, out: str, analysed: tuple | None = None) -> int:
    """Writes the page; returns the number of charts drawn."""
    page = render_html(path, analysed)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    return page.count("<svg")
