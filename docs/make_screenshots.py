"""Make the README's pictures from real output (run from the repo root after the demo):

    python docs/make_screenshots.py [--trace runs/demo/trace.json.gz]

- docs/img/report.png: `rldbg report TRACE --html` rendered by headless Chromium (Debian's `chromium`).
- docs/img/top.png: `rldbg top`'s Roles and Memory views, rendered by Textual from the TUI's deterministic
  test source (the same frames the snapshot tests pin), converted from SVG by Chromium.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IMG = Path(__file__).resolve().parent / "img"


def chromium_png(page: Path, out: Path, width: int, height: int) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("make_screenshots: needs Debian's chromium (apt-get install chromium)")
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={out}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)


def report_png(trace: str, tmp: Path) -> None:
    from rldbg.trace.html_report import write_html
    page = tmp / "report.html"
    write_html(trace, str(page))
    chromium_png(page, IMG / "report.png", 1000, 1900)


async def _top_svgs() -> list[str]:
    from rldbg.tui.app import TopApp
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))   # the snapshot tests' synthetic source
    from fake_source import FakeSource
    app = TopApp(FakeSource(workers=4, events=2_000), refresh=0.2)
    svgs = []
    async with app.run_test(size=(130, 36)) as pilot:
        while app.polls < 2:
            await pilot.pause(0.05)
        for key in ("1", "3"):
            await pilot.press(key)
            await pilot.pause(0.3)
            svgs.append(app.export_screenshot())
    return svgs


def top_png(tmp: Path) -> None:
    svgs = asyncio.run(_top_svgs())
    page = tmp / "top.html"
    page.write_text("<html><body style='margin:0;background:#0c0c0c'>" +
                    "".join(f"<div style='width:1000px'>{s}</div>" for s in svgs) + "</body></html>")
    chromium_png(page, IMG / "top.png", 1000, 1180)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="runs/demo/trace.json.gz")
    args = ap.parse_args()
    if not Path(args.trace).is_file():
        sys.exit(f"make_screenshots: {args.trace} not found; run `python -m reference_trainer --preset demo` first")
    IMG.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        report_png(args.trace, Path(d))
        top_png(Path(d))
    print(f"wrote {IMG / 'report.png'} and {IMG / 'top.png'}")


if __name__ == "__main__":
    main()
