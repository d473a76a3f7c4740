"""The HTML timeline written beside each violation: lanes, bars, the
operations no legal order could place, and nothing it must not hold.

The page is opened in a real headless Chromium (Debian's ``chromium``), and
what it shows is read from the DOM after its script ran. Without Chromium
the browser test is skipped, except under ``CI=true``, where a missing
browser fails it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import attrs
import pytest

import runstore.model
from runstore import ManualClock, OwnerId
from runstore.stateful import HistoryRecorder, RecordingClock, check_history, write_violation
from runstore.stateful._histories._timeline import render_timeline

B = OwnerId("host-b", 2, "b")
#: Run ids admit any well-formed text: markup and quotes included.
OLD = '<script>alert("old")</script>'
NEW = "new'\"&<i>"
SECRET = "hunter2-s3cr3t"
STATE = '{"password": "' + SECRET + '"}'
LANE_ONE = 'w"1<b>'
LANE_TWO = "w2"
CHROMIUM = "/usr/bin/chromium"


def passed_over():
    """Two clients of one model: ``LANE_ONE`` creates OLD then NEW (state
    holding a secret), ``LANE_TWO``'s claim_next takes OLD; then the history
    as a store that took NEW instead would record it (a claim_next that
    passed over an older claimable run)."""
    clock = ManualClock(1_000)
    model = runstore.model.ModelRunStore(RecordingClock(clock))
    one = HistoryRecorder(process=LANE_ONE)
    two = HistoryRecorder(process=LANE_TWO)
    one.record(model).create(OLD, STATE)
    clock.advance(1)
    one.record(model).create(NEW, STATE)
    clock.advance(1)
    two.record(model).claim_next(B, clock.now_ms())
    history = sorted(one.operations() + two.operations(), key=lambda op: op.invoked_ns)
    call = history[-1]
    assert call.value.run_id == OLD
    took = attrs.evolve(call.value, run_id=NEW, created_at_ms=call.value.created_at_ms + 1)
    return [*history[:-1], attrs.evolve(call, value=took)]


def violation():
    verdict = check_history(passed_over())
    (failing,) = verdict.violations
    return failing


class _Dom(HTMLParser):
    """The lanes, the bars (with their classes) and the body's attributes of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes: list[str] = []
        self.bars: list[dict[str, str]] = []
        self.body: dict[str, str] = {}
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attributes}
        classes = found.get("class", "").split()
        if tag == "body":
            self.body = found
        if "lane" in classes:
            self.lanes.append(found["data-lane"])
        if "bar" in classes:
            self.bars.append(found)

    def handle_data(self, data: str) -> None:
        self.texts.append(data)


def parse(page: str) -> _Dom:
    dom = _Dom()
    dom.feed(page)
    return dom


def test_the_page_holds_no_run_state_and_escapes_every_id(tmp_path: Path) -> None:
    """The secret in the runs' state appears nowhere in the page; run ids and
    lane labels holding markup and quotes are escaped (no ``<script>`` from
    an id, attribute values intact when parsed back); the page loads
    nothing from anywhere; the file is written 0600 beside the text report."""
    failing = violation()
    written = write_violation(failing, tmp_path)
    assert [path.suffix for path in written] == [".txt", ".jsonl", ".html"]
    page = written[2].read_text(encoding="utf-8")
    assert stat.S_IMODE(os.stat(written[2]).st_mode) == 0o600
    assert SECRET not in page
    assert SECRET in written[1].read_text(encoding="utf-8")  # the replayable history keeps it
    assert OLD not in page
    assert "<i>" not in page
    assert page.count("<script>") == 1  # the page's own script, and no other
    for marker in ("http://", "https://", "//cdn", "<link", " src=", "@import", "url("):
        assert marker not in page
    dom = parse(page)
    assert set(dom.lanes) == {LANE_ONE, LANE_TWO}
    assert OLD in "".join(dom.texts)
    assert {bar["data-lane"] for bar in dom.bars} == {LANE_ONE, LANE_TWO}


def test_the_highlighted_bars_are_the_operations_no_order_could_place() -> None:
    """For a violation of an object (a get answering a status nobody wrote)
    and one of the oldest-claim rule, the bars marked ``unplaced`` are
    exactly ``PartitionVerdict.unplaced``, and there is one bar per
    operation of the minimal sub-history."""
    history = passed_over()
    create = history[0]
    wrong = attrs.evolve(create, id="w2:9", process=LANE_TWO, method="get", args=(NEW,), kwargs={})
    row = attrs.evolve(history[-1].value, status="completed")
    reading = attrs.evolve(
        wrong, invoked_ns=history[-1].returned_ns + 1, returned_ns=history[-1].returned_ns + 2
    )
    verdict = check_history([*history, attrs.evolve(reading, value=row, clock_ms=())])
    assert len(verdict.violations) == 2
    for failing in verdict.violations:
        dom = parse(render_timeline(failing))
        assert failing.unplaced
        assert {b["data-op"] for b in dom.bars} == {op.id for op in failing.minimal or ()}
        marked = {b["data-op"] for b in dom.bars if "unplaced" in b["class"].split()}
        assert marked == {op.id for op in failing.unplaced}


def chromium() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true and no Chromium at /usr/bin/chromium: the timeline cannot be opened")
    pytest.skip("no Chromium (/usr/bin/chromium): install Debian's chromium to open the timeline")


def test_chromium_shows_the_lanes_the_bars_and_the_unplaced_operations(tmp_path: Path) -> None:
    """Opened in headless Chromium, the page's script runs (the body says
    ``data-ready="1"`` and the count line is filled in), and the DOM has one
    lane per client, one bar per operation, and the highlighted bars are the
    operations the checker could not place."""
    browser = chromium()
    failing = violation()
    (_, _, html_path) = write_violation(failing, tmp_path)
    dumped = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            html_path.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    dom = parse(dumped)
    assert dom.body.get("data-ready") == "1"
    assert set(dom.lanes) == {LANE_ONE, LANE_TWO}
    assert sorted(b["data-op"] for b in dom.bars) == sorted(op.id for op in failing.minimal or ())
    marked = {b["data-op"] for b in dom.bars if "unplaced" in b["class"].split()}
    assert marked == {op.id for op in failing.unplaced}
    assert marked == {op.id for op in failing.minimal or () if op.method == "claim_next"}
    assert f"{len(dom.bars)} operations, 1 that no legal order could place" in "".join(dom.texts)
    assert SECRET not in dumped
