"""Breakpoint specs, target parsing, launch.json merging and error messages (no Ray)."""
import json

import pytest

from rldbg.commands.vscode import strip_jsonc, update_launch
from rldbg.debug import breakpoints as bp
from rldbg.debug.specs import FORM, SpecError, SpecSet, from_env, matches, parse, parse_many
from rldbg.context import WorkerIdentity, parse_label, worker_label
from rldbg.debug.paused_workers import TargetError, resolve_target


def test_parse_forms():
    s = parse("actor.update_actor@rank=1,step=3")
    assert (s.role, s.method, s.ranks, s.steps) == ("actor", "update_actor", {1}, {3})
    assert parse("actor.*@rank=0").ranks == {0}
    assert parse("actor.x@rank=0|1").ranks == {0, 1}
    assert parse("actor.x@rank=0-3").ranks == {0, 1, 2, 3}
    assert parse("actor.x@rank=1,2,step=3").ranks == {1, 2}
    assert parse("critic").method == "*"
    w = parse("actor.gen@rank=1,when=step is not None and step % 2 == 0")
    assert w.when == "step is not None and step % 2 == 0" and w.ranks == {1}
    assert parse(w.text) == w  # canonical text round-trips


def test_matches():
    s = parse("actor.update_*@rank=1,step=3")
    assert matches(s, "actor", 1, 3, "update_actor")
    assert not matches(s, "actor", 0, 3, "update_actor")
    assert not matches(s, "actor", 1, 4, "update_actor")
    assert not matches(s, "critic", 1, 3, "update_actor")
    # A colocated worker matches a spec for any of its roles.
    assert matches(parse("critic.*"), "actor_rollout_ref+critic", 0, None, "compute_values")
    when = parse("rollout.generate@when=step % 2 == 0")
    assert matches(when, "rollout", 0, 4, "generate")
    assert not matches(when, "rollout", 0, None, "generate")  # None % 2 fails: no pause


@pytest.mark.parametrize("text,needle", [
    ("", "empty spec"),
    ("actor.update@rank=x", "rank='x'"),
    ("actor.update@rank=3-1", "rank='3-1'"),
    ("actor.update@rnk=1", "unknown filter 'rnk'"),
    ("actor.update@", "'@' must be followed"),
    ("actor.update@when=(", "not a Python expression"),
    ("act or.update", "is not ROLE.METHOD"),
])
def test_bad_specs_are_one_line_with_the_form(text, needle):
    with pytest.raises(SpecError) as e:
        parse(text)
    msg = str(e.value)
    assert needle in msg and FORM in msg and "\n" not in msg


def test_bad_spec_lists_known_roles_and_methods():
    with pytest.raises(SpecError) as e:
        parse("actr.update_actor", known_roles=["actor", "critic"], known_methods=["update_actor"])
    assert "unknown role 'actr'" in str(e.value) and "known roles: actor, critic" in str(e.value)
    with pytest.raises(SpecError) as e:
        parse("actor.updat", known_roles=["actor"], known_methods=["update_actor", "generate"])
    assert "known methods: generate, update_actor" in str(e.value)


def test_sources_and_specset_roundtrip():
    env = {"RLDBG_BREAKPOINTS": "actor.update_actor@rank=1;critic.*@step=2-3; "}
    assert [s.text for s in from_env(env)] == ["actor.update_actor@rank=1", "critic.*@step=2|3"]
    assert len(parse_many(["actor.a", "critic.b"])) == 2
    ss = SpecSet(["actor.update_actor@rank=1"])
    v = ss.version
    ss.add("critic.*@rank=0")
    assert ss.version > v and len(ss) == 2
    assert ss.match("critic", 0, None, "x").role == "critic"
    assert ss.match("critic", 1, None, "x") is None
    texts = [s.text for s in ss.list()]
    assert [s.text for s in SpecSet.from_env({"RLDBG_BREAKPOINTS": ";".join(texts)}).list()] == texts
    assert ss.remove("critic.*@rank=0") and not ss.remove("critic.*@rank=0")
    assert [s.text for s in ss.list()] == ["actor.update_actor@rank=1"]


def test_method_entry_matching_without_pausing(monkeypatch):
    monkeypatch.setenv("RLDBG_BREAKPOINTS", "actor.update_actor@rank=1")
    assert bp.match_method_entry("actor", 1, "update_actor", 0).text == "actor.update_actor@rank=1"
    assert bp.match_method_entry("actor", 0, "update_actor", 0) is None
    monkeypatch.setenv("RLDBG_BREAKPOINTS", "garbage@@")  # a bad env spec warns, never raises
    assert bp.match_method_entry("actor", 1, "update_actor", 0) is None
    monkeypatch.delenv("RLDBG_BREAKPOINTS")
    bp.set_active_specs(["critic.*@step=2"])
    try:
        assert bp.match_method_entry("critic", 5, "fit", 2) is not None
        assert not bp.check_method_entry("critic", 5, "fit", 3)
    finally:
        bp.set_active_specs([])


def test_repr_and_targets():
    # rldbg formats the label and reads it back; anything else is not a worker label.
    label = worker_label(("actor_rollout_ref", "critic"), 1, 2)
    assert label == "actor_rollout_ref+critic[rank 1/2]"
    ident = parse_label(label)
    assert ident == WorkerIdentity(("actor_rollout_ref", "critic"), 1, 2) and ident.label == label
    assert ident.role == "actor_rollout_ref+critic" and ident.has_role("critic") and not ident.has_role("ref")
    for other in ("Worker", "ActorWorker:None", "actor[rank x/2]", "[rank 1/2]", "actor[rank 1/2"):
        assert parse_label(other) is None
    with pytest.raises(ValueError, match="bad role"):
        worker_label("actor role", 0, 1)
    never = lambda: pytest.fail("the dashboard must not be needed for HOST:PORT")  # noqa: E731
    assert resolve_target("127.0.0.1:5678", never)[:2] == ("127.0.0.1", 5678)
    for bad, needle in [("nonsense", "expected HOST:PORT"), ("127.0.0.1:x", "not a port"), ("actor:x", "port or a rank")]:
        with pytest.raises(TargetError, match=needle):
            resolve_target(bad, never)


def test_launch_json_merge_keeps_user_entries(tmp_path):
    path = tmp_path / ".vscode" / "launch.json"
    path.parent.mkdir()
    path.write_text('{\n // mine\n "version": "0.2.0", "configurations": [\n'
                    '  {"name": "my app", "type": "debugpy", "request": "launch", "program": "a.py",},\n'
                    '  {"name": "rldbg: actor rank 0", "type": "debugpy", "request": "attach", "connect": {"port": 1}}]}')
    entry = {"name": "rldbg: actor rank 1", "type": "debugpy", "request": "attach", "connect": {"host": "127.0.0.1", "port": 4242}}
    update_launch(path, [entry])
    first = path.read_text()
    update_launch(path, [entry])
    assert path.read_text() == first  # idempotent
    names = [c["name"] for c in json.loads(first)["configurations"]]
    assert names == ["my app", "rldbg: actor rank 1"]  # stale generated entry replaced
    assert json.loads(strip_jsonc('{"a": "x // not a comment", /* c */ "b": [1,],}')) == {"a": "x // not a comment", "b": [1]}


def test_listener_stays_on_loopback(monkeypatch):
    from rldbg.debug.debugpy_port import choose_host

    monkeypatch.delenv("RLDBG_DEBUG_ALLOW_REMOTE", raising=False)
    assert choose_host("127.0.0.1") == "127.0.0.1"
    with pytest.warns(RuntimeWarning, match="no authentication"):
        assert choose_host("10.1.2.3") == "127.0.0.1"
    monkeypatch.setenv("RLDBG_DEBUG_ALLOW_REMOTE", "1")
    assert choose_host("10.1.2.3") == "10.1.2.3"
