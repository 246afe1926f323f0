"""One live run per run_dir (reference_trainer/run_lock.py), in this process with real flocks; the
run as users meet it is test_driver_stop's second-run test."""
from __future__ import annotations

import errno

import pytest

from reference_trainer import run_lock
from reference_trainer.config_checks import ConfigError


def test_a_held_folder_is_refused_and_free_again_after(tmp_path):
    with run_lock.hold(str(tmp_path)):
        with pytest.raises(ConfigError, match=r"where a live run \(pid \d+\) writes; give this run another"):
            with run_lock.hold(str(tmp_path)):
                pass
    with run_lock.hold(str(tmp_path)):   # released with the block
        pass


def test_a_file_system_without_locks_runs_unlocked_and_says_so(tmp_path, monkeypatch, capsys):
    """Some network mounts answer flock with ENOLCK; none does here, so flock is made to."""
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(run_lock.fcntl, "flock", no_locks)
    with run_lock.hold(str(tmp_path)):
        ran = True
    assert ran
    assert capsys.readouterr().err == (f"warning: cannot lock {tmp_path}/.run.lock (No locks available): a second run "
                                       "into trainer.run_dir would not be refused\n")
