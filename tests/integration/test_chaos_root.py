"""Faults on local processes that need root (``cluster.root_backend``, ``cluster.tmpfs``): a
full disk through a tmpfs under each broker's log dir. The catalog's leader-disk-full,
shortened, gets the simulation's verdict on real brokers: the leader's append fails with ENOSPC,
it halts, a new leader is elected, and once the ballast is gone it comes back; every tmpfs is
unmounted afterwards, the brokers' files copied back onto the run's directory.

Skipped (one line) only when this process may not mount a tmpfs (not root, or root without
CAP_SYS_ADMIN); CI runs as root.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from kafkasim.cluster import root_backend
from kafkasim.cluster.chaos import ChaosError
from kafkasim.cluster.root_backend import LOCAL_ROOT, RootLocalBackend
from kafkasim.cluster.tmpfs import BALLAST_FILE, TmpfsLogDirs, mount_points, mount_refusal
from kafkasim.faults import checker, runner
from kafkasim.faults.reading import find, load
from kafkasim.sim.backend import SIM
from tests.integration.test_chaos import leader_epochs, needs_zookeeper, shortened


def needs_mounting() -> None:
    refusal = mount_refusal()
    if refusal is not None:
        pytest.skip(f"cannot mount a tmpfs here: {refusal}")


def mounts_under(path: Path) -> list[str]:
    root = str(path.resolve())
    return sorted(m for m in mount_points() if m == root or m.startswith(root + "/"))


def test_a_tmpfs_fills_to_enospc_frees_and_unmounts_keeping_its_files(tmp_path: Path) -> None:
    needs_mounting()
    disk = TmpfsLogDirs(size_bytes=4 * 1024 * 1024)
    logs = tmp_path / "logs"
    try:
        disk.mount(logs)
        assert mounts_under(tmp_path) == [str(logs.resolve())]
        (logs / "events-0").mkdir()
        (logs / "events-0" / "00000000000000000000.log").write_bytes(b"x" * 10_000)
        ballast = disk.fill(logs)
        assert 3 * 1024 * 1024 < ballast <= 4 * 1024 * 1024
        with pytest.raises(OSError) as full:
            (logs / "events-0" / "more").write_bytes(b"y" * 8192)
        assert full.value.errno == errno.ENOSPC
        disk.free(logs)
        (logs / "events-0" / "more").write_bytes(b"y" * 8192)
    finally:
        disk.unmount_all()
    assert mounts_under(tmp_path) == []
    assert (logs / "events-0" / "00000000000000000000.log").read_bytes() == b"x" * 10_000
    assert (logs / "events-0" / "more").stat().st_size == 8192
    assert not (logs / BALLAST_FILE).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_a_failed_mount_leaves_no_mount_behind_and_starts_nothing(tmp_path: Path) -> None:
    needs_mounting()
    backend = RootLocalBackend(load(find("leader-disk-full")), tmp_path / "run")
    in_the_way = backend.log_dir(3) / "stale"
    in_the_way.parent.mkdir(parents=True)
    in_the_way.write_text("a broker's old data must not be hidden under a mount")
    with pytest.raises(ChaosError, match=r"broker-3/logs: the directory is not empty"):
        backend.start()
    assert mounts_under(tmp_path) == []
    assert not any(backend.running(b) for b in backend.broker_ids)
    backend.close()
    assert in_the_way.read_text().startswith("a broker's old data")


def test_filling_refuses_a_directory_it_did_not_mount(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a tmpfs this cluster mounted"):
        TmpfsLogDirs().fill(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_leader_disk_full_on_real_brokers_agrees_with_the_simulation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    needs_mounting()
    needs_zookeeper()
    assert root_backend.LOCAL_ROOT.injectable >= {"disk_full"}
    caplog.set_level(logging.ERROR)
    chosen = shortened("leader-disk-full", at_s=5.0, duration_s=8.0)
    events: list[str] = []
    history = runner.run(chosen, LOCAL_ROOT, tmp_path / "real", on_event=events.append)
    real = checker.check(history)
    simulated = checker.check(runner.run(chosen, SIM, tmp_path / "sim", seed=1))

    assert mounts_under(tmp_path) == []
    assert real.ok, real.verdict_lines()
    assert (real.verdict, real.lost) == (simulated.verdict, simulated.lost) == ("SAFE", 0)
    assert real.acknowledged > 500 and real.read >= real.acknowledged
    (fault,) = history.faults
    target = int(fault.target.split(" → ")[1])
    # The leader's append failed on the full tmpfs and it halted; a new leader took over.
    log = (tmp_path / "real" / f"broker-{target}" / "broker.log").read_text()
    assert f"Halting broker {target} because log dir" in log
    assert "No space left on device" in log
    assert len(leader_epochs(history)) >= 2, "no new leader was elected"
    assert any(f"broker {target} serving again" in e for e in events), events
    assert {broker for _, _, broker in history.final_logs} == {1, 2, 3}
    assert history.meta["runtime"] == "local processes as root"
    # The brokers' files are back on the run's directory, without the ballast.
    for broker_id in (1, 2, 3):
        logs = tmp_path / "real" / f"broker-{broker_id}" / "logs"
        assert (logs / "events-0").is_dir()
        assert not (logs / BALLAST_FILE).exists()
    assert os.listdir(tmp_path / "real")
