"""SVG snapshots pin the layout of each view (pytest-textual-snapshot), and Pilot checks keys
that need no cluster. The data comes from FakeSource: fixed actors and timestamps, so frames are
identical run to run. Update after an intended change: pytest tests/test_tui_snapshots.py --snapshot-update"""
from __future__ import annotations

import asyncio

from rldbg.tui.app import TopApp
from fake_source import FakeSource

SIZE = (130, 36)


def app() -> TopApp:
    return TopApp(FakeSource(workers=4, events=2_000), refresh=0.2)


def ready(*keys):
    async def run_before(pilot):
        while pilot.app.polls < 2:   # two polls: all events read, the picture is final
            await pilot.pause(0.05)
        await pilot.press(*keys)
        await pilot.pause(0.2)
    return run_before


def test_roles_snapshot(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, run_before=ready("1"))


def test_timeline_snapshot(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, run_before=ready("2"))


def test_memory_snapshot(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, run_before=ready("3"))


def test_stepper_snapshot(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, run_before=ready("4"))


def test_breakpoints_snapshot(snap_compare):
    assert snap_compare(app(), terminal_size=SIZE, run_before=ready("5"))


def test_keys_reach_the_source_and_bad_specs_show_the_hub_message():
    async def main():
        src = FakeSource(workers=4, events=500)
        a = TopApp(src, refresh=0.2, heartbeat_s=0.1)
        async with a.run_test(size=SIZE) as pilot:
            while a.polls < 1:
                await pilot.pause(0.05)
            await pilot.press("4")
            await pilot.pause(0.3)   # the tab switch moves focus to the stepper after a refresh
            await pilot.press("a", "s", "space", "n", "c", "m")
            await pilot.press(*"update_actor", "enter")
            await pilot.pause(0.5)
            assert [x[0] for x in src.actions] == ["arm", "step", "step", "run_to_step", "continue", "run_to_method"]
            assert src.actions[-1][1] == {"method": "update_actor"}
            await pilot.press("5")
            await pilot.pause(0.3)
            await pilot.press("b", *"actor.update_actor@rank", "enter")
            await pilot.pause(0.5)
            assert any("400" in n.message for n in a._notifications), list(a._notifications)
            await pilot.press("b", *"critic.update_critic@step=2", "enter")
            await pilot.pause(0.5)
            assert "critic.update_critic@step=2" in src.specs
            await pilot.press("e")
            await pilot.pause(0.5)
            assert any("trace.snapshot.json.gz" in n.message for n in a._notifications)
            await pilot.press("1")
            await pilot.pause(0.3)
            await pilot.press("s", "slash", *"critic", "enter")
            await pilot.pause(0.3)
            assert {r[1] for r in (a.query_one("#roles-table").get_row_at(i) for i in range(a.query_one("#roles-table").row_count))} == {"critic"}
            await pilot.press("question_mark")
            await pilot.pause(0.2)
            assert a.screen.__class__.__name__ == "HelpScreen"
            await pilot.press("escape")
            assert src.beats > 0   # heartbeats flow while the app is open
    asyncio.run(main())


def test_roles_table_keeps_the_selected_worker_across_sorts_and_sorts_on_header_click():
    async def main():
        a = TopApp(FakeSource(workers=8, events=500), refresh=0.2)
        async with a.run_test(size=SIZE) as pilot:
            while a.polls < 1:
                await pilot.pause(0.05)
            await pilot.press("1")
            await pilot.pause(0.2)
            table = a.query_one("#roles-table")
            await pilot.press("down", "down", "down")
            chosen = a.query_one("RolesView").selected().key
            await pilot.press("s")           # role -> state order: the same worker stays selected
            await pilot.pause(0.2)
            assert a.query_one("RolesView").selected().key == chosen
            assert table.keys.index(chosen) == table.cursor_row
            x = sum(w + 2 for w in table._widths[:4])   # into the "method" header cell
            await pilot.click("#roles-table", offset=(x + 1, 0))
            await pilot.pause(0.2)
            assert a.query_one("RolesView").sort == "method" and table.sorted_by == "method"
            methods = [table.get_row_at(i)[4] for i in range(table.row_count)
                       if table.get_row_at(i)[3] != "dead"]
            assert methods == sorted(methods)
            await pilot.click("#roles-table", offset=(2, 3))   # the third row
            assert table.cursor_row == table.top + 2
    asyncio.run(main())
