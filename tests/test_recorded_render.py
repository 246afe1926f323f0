"""The head of `rldbg report` on a flight-recorder dump (rldbg.analysis.recorded.render)."""
from __future__ import annotations

from rldbg.analysis.recorded import render


def test_a_dump_before_the_first_step_says_so_not_none():
    lines = render({"trigger": {"reason": "manual", "step": None, "role": "driver", "by": "rldbg dump"},
                    "steps": [], "window": 5})
    assert lines[0] == "flight recorder dump: manual before the first step: by rldbg dump", lines
    assert render({"trigger": {"reason": "manual", "step": 7, "role": "driver"}, "steps": [(7, 7)], "window": 5})[0] == \
        "flight recorder dump: manual at step 7"
