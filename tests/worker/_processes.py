"""``runstore worker`` processes started by a test, their JSON logs, and the
shared clock the test moves (``tests/worker/test_worker_fleet_processes.py``,
``tests/cli/test_worker_cli.py``).

The test waits for progress in real time (a log line, a row) but never for
lease timing: that moves only when the test moves the clock file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .process_handlers import CLOCK_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
#: How long, in real seconds, a test waits for progress before it gives up.
PROGRESS_S = 60.0
HANDLERS = "tests.worker.process_handlers"


def wait_until(done: Callable[[], object], what: str, timeout_s: float = PROGRESS_S) -> Any:
    """Poll ``done`` until it answers something true, and return that; fail
    saying ``what`` was awaited when ``timeout_s`` real seconds pass first."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = done()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.01)


class WorkerProcess:
    """One ``runstore worker --json`` process; its log lines in ``events()``.

    ``plant`` names a bug of ``planted_worker.py`` to run the command with.
    """

    def __init__(
        self,
        name: str,
        db: str,
        handler: str,
        clock_path: Path,
        folder: Path,
        *options: str,
        as_json: bool = True,
        plant: str | None = None,
    ) -> None:
        self.name = name
        self.log_path = folder / f"{name}.log"
        self.err_path = folder / f"{name}.err"
        env = dict(os.environ)
        env[CLOCK_VARIABLE] = str(clock_path)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        program = "runstore"
        if plant is not None:
            # The command with a bug planted in the worker (planted_worker.py).
            env["RUNSTORE_TEST_PLANT"] = plant
            program = "tests.worker.planted_worker"
        command = [
            sys.executable,
            "-X",
            "faulthandler",  # SIGABRT dumps every thread's stack (see dump_stacks)
            "-m",
            program,
            "worker",
            f"{HANDLERS}:{handler}",
            "--db",
            db,
            "--clock-file",
            str(clock_path),
            *(["--json"] if as_json else []),
            *options,
        ]
        with self.log_path.open("wb") as out, self.err_path.open("wb") as err:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)

    def text(self) -> str:
        """The log as written so far (whole lines only)."""
        data = self.log_path.read_text()
        return data[: data.rfind("\n") + 1]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The JSON lines written so far (of ``kind`` when given)."""
        lines = [json.loads(line) for line in self.text().splitlines() if line.strip()]
        return [line for line in lines if kind is None or line["event"] == kind]

    def started(self) -> dict[str, Any]:
        """The ``started`` line, once the worker has written it."""
        return wait_until(lambda: self.events("started"), f"{self.name} to start")[0]  # type: ignore[no-any-return]

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the worker process."""
        self.process.send_signal(signum)

    def wait_exit(self, timeout_s: float = PROGRESS_S) -> int:
        """The exit status, waiting up to ``timeout_s`` real seconds."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit: {self.diagnosis()}") from None

    def diagnosis(self) -> str:
        """The tail of the log and of standard error, for a failure message."""
        return f"log: {self.text()[-2000:]!r}; stderr: {self.err_path.read_text()[-2000:]!r}"

    def dump_stacks(self) -> str:
        """Abort the process (it prints every thread's stack on standard error)
        and return what it printed: where a stuck worker was stuck."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
        return self.err_path.read_text()[-6000:]

    def end(self) -> None:
        """Kill the process if it still runs (cleanup after a failure)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(30)
