"""Collapsed stacks ("outer;...;inner count" per line, py-spy's raw format) to speedscope JSON
and a static SVG flame graph.

One py-spy recording feeds both files: two py-spy processes sampling the same pid would fight
over ptrace, and the dashboard's cpu_profile returns one format per request.
"""
from __future__ import annotations

import hashlib
import json
from xml.sax.saxutils import escape

from rldbg.profilers.pyspy import parse_frame


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    out = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def to_speedscope(samples, name: str) -> dict:
    frames, index, stacks, weights = [], {}, [], []
    for stack, count in samples:
        ids = []
        for f in stack:
            if f not in index:
                index[f] = len(frames)
                fr = parse_frame(f)
                frames.append({"name": fr.name, "file": fr.file, **({"line": fr.line} if fr.line else {})}
                              if fr else {"name": f})
            ids.append(index[f])
        stacks.append(ids)
        weights.append(count)
    return {"$schema": "https://www.speedscope.app/file-format-schema.json", "exporter": "rldbg",
            "name": name, "activeProfileIndex": 0, "shared": {"frames": frames},
            "profiles": [{"type": "sampled", "name": name, "unit": "none", "startValue": 0,
                          "endValue": sum(weights), "samples": stacks, "weights": weights}]}


def _tree(samples) -> dict:
    root = {"n": 0, "kids": {}}
    for stack, count in samples:
        root["n"] += count
        node = root
        for f in stack:
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += count
    return root


def _colour(name: str) -> str:
    h = hashlib.md5(name.encode()).digest()
    return f"rgb({205 + h[0] % 50},{80 + h[1] % 120},{40 + h[2] % 40})"


def to_svg(samples, title: str, width: int = 1200, row: int = 16) -> str:
    root = _tree(samples)
    total = max(root["n"], 1)
    rects, depth_max = [], 0

    def walk(node, x: float, depth: int) -> None:
        nonlocal depth_max
        for name, kid in sorted(node["kids"].items()):
            w = kid["n"] / total * width
            if w >= 0.3:   # narrower than a pixel third: invisible, and it bloats the file
                depth_max = max(depth_max, depth)
                rects.append((x, depth, w, name, kid["n"]))
                walk(kid, x, depth + 1)
            x += w

    walk(root, 0.0, 0)
    top = 30
    height = top + (depth_max + 1) * row + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)} '
           f'({root["n"]} samples)</text>']
    for x, depth, w, name, n in rects:
        y = height - 10 - (depth + 1) * row   # flame: callers at the bottom, callees above
        tip = f"{name} — {n} samples ({100 * n / total:.1f}%)"
        out.append(f'<g><title>{escape(tip)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
                   f'height="{row - 1}" fill="{_colour(name)}"/>')
        chars = int((w - 4) / 6.6)
        if chars >= 3:
            label = name if len(name) <= chars else name[:chars - 2] + ".."
            out.append(f'<text x="{x + 2:.2f}" y="{y + row - 4}">{escape(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def write_both(collapsed_text: str, base: str, name: str) -> tuple[str, str]:
    """Write <base>.speedscope.json and <base>.svg; returns their paths."""
    samples = parse_collapsed(collapsed_text)
    ss, svg = f"{base}.speedscope.json", f"{base}.svg"
    with open(ss, "w", encoding="utf-8") as f:
        json.dump(to_speedscope(samples, name), f)
    with open(svg, "w", encoding="utf-8") as f:
        f.write(to_svg(samples, name))
    return ss, svg
