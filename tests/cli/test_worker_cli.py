"""``runstore worker``: the shared file clock, usage errors, the log lines, and
a clean stop on SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runstore.cli._clocks import FileClock

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_file_clock_is_shared_by_every_reader_of_the_file(tmp_path: Path) -> None:
    """A clock moved through one mapping reads the same through another, and
    the file holds the time as eight little-endian bytes."""
    path = tmp_path / "clock"
    driver = FileClock.create(path, 1_000)
    reader = FileClock(path)
    assert reader.now_ms() == 1_000
    assert driver.advance(250) == 1_250
    assert reader.now_ms() == 1_250
    assert path.read_bytes() == (1_250).to_bytes(8, "little")
    driver.set(2**40)
    assert reader.now_ms() == 2**40
    driver.close()
    reader.close()


def test_file_clock_is_shared_with_another_process(tmp_path: Path) -> None:
    """A child process reads the time the parent set, and sleeps until the
    parent moves the clock past its deadline."""
    path = tmp_path / "clock"
    driver = FileClock.create(path, 5_000)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from runstore.cli._clocks import FileClock\n"
            f"c = FileClock({str(path)!r}); print(c.now_ms(), flush=True)\n"
            "c.sleep_until(9_000); print(c.now_ms(), flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "5000"
    driver.advance(3_999)
    driver.advance(1)
    out, _ = child.communicate(timeout=30)
    assert out.strip() == "9000"
    assert child.returncode == 0


def test_file_clock_wakes_a_sleeping_thread_and_never_moves_back(tmp_path: Path) -> None:
    """``sleep_until`` returns once the file reaches the deadline; the clock
    refuses to move backwards, and a read-only clock refuses to move."""
    driver = FileClock.create(tmp_path / "clock", 0)
    reader = FileClock(tmp_path / "clock")
    woke: list[int] = []
    sleeper = threading.Thread(target=lambda: (reader.sleep_until(100), woke.append(1)))
    sleeper.start()
    driver.advance(99)
    assert not woke
    driver.advance(1)
    sleeper.join(timeout=30)
    assert woke == [1]
    with pytest.raises(ValueError, match="forward"):
        driver.set(50)
    with pytest.raises(ValueError, match="forward"):
        driver.advance(-1)
    with pytest.raises(ValueError, match="read-only"):
        reader.set(500)
    reader.sleep_until(0)  # a deadline passed returns at once


def test_file_clock_refuses_a_file_that_is_not_a_clock(tmp_path: Path) -> None:
    """A file shorter than eight bytes is not a clock file."""
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(ValueError, match="not a clock file"):
        FileClock(tmp_path / "short")
    with pytest.raises(ValueError):
        FileClock.create(tmp_path / "negative", -1)
