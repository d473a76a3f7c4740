"""A violation as a picture: a self-contained HTML timeline of its minimal sub-history.

``render_timeline(verdict)`` draws the operations of one violation (the
shrunk sub-history, or the whole object when it was not shrunk) as
Porcupine's visualization does: one lane per client (``Operation.process``),
one bar per operation from its invocation to its return (to the right edge
when it never returned), and the operations the longest legal order found
could not place highlighted. Under the picture, a table of the same
operations and the explanation: the order found, and what the model answers
for each operation that could have gone next.

The page stands alone: its CSS and its script are inline, it loads nothing
(no network resource, no font, no image), and it works from a ``file://``
URL. It never holds run state: calls and answers are shown as the text
report shows them (``call_text``, ``value_text``: state by length and
digest only), and every text and attribute value is HTML-escaped. The
script only reads the page (it shows an operation's details when its bar is
clicked and marks ``<body data-ready="1">`` once it ran).

Stable hooks for tools and tests: each lane is ``<div class="lane"
data-lane="LABEL">``, each bar ``<div class="bar" data-op="ID"
data-lane="LABEL" data-method="METHOD">``, with the class ``unplaced`` when
no legal order placed it (``PartitionVerdict.unplaced``) and ``pending``
when it never returned.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ._history import Operation
from ._linearize import PartitionVerdict
from ._text import answer_text, result_text

#: The narrowest a bar is drawn, in percent of the time axis (so an instant call shows).
MIN_BAR_PERCENT: Final = 0.6

_STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
.reason { margin: 0 0 1em; color: #444; }
.legend span { display: inline-block; padding: 0 .6em; margin-right: .6em; border-radius: 3px; }
.timeline { border: 1px solid #ccd; border-radius: 4px; padding: .5em 0; margin: 1em 0; }
.lane { display: flex; align-items: stretch; border-bottom: 1px dashed #e3e6ee; }
.lane:last-child { border-bottom: none; }
.lane-name { flex: 0 0 11em; padding: .3em .6em; font-family: monospace; overflow: hidden;
  text-overflow: ellipsis; white-space: nowrap; }
.track { position: relative; flex: 1 1 auto; margin-right: 1em; }
.bar { position: absolute; height: 1.5em; box-sizing: border-box; border-radius: 3px;
  padding: 0 .3em; font: 12px/1.5em monospace; white-space: nowrap; overflow: hidden;
  cursor: pointer; background: #cfe3ff; border: 1px solid #6b9be0; }
.bar.pending { background: repeating-linear-gradient(45deg, #eee, #eee 5px, #ddd 5px, #ddd 10px);
  border-style: dashed; }
.bar.unplaced, .legend .unplaced { background: #ffd0cc; border: 2px solid #d2301f; }
.bar.selected { outline: 2px solid #1d2330; }
.legend .placed { background: #cfe3ff; border: 1px solid #6b9be0; }
table { border-collapse: collapse; margin: 1em 0; font: 12px/1.4 monospace; }
td, th { border-bottom: 1px solid #e3e6ee; padding: .2em .6em; text-align: left;
  vertical-align: top; }
tr.unplaced td { background: #fff0ee; }
tr.selected td { outline: 1px solid #1d2330; }
#details { min-height: 2.5em; font: 12px/1.4 monospace; white-space: pre-wrap;
  background: #f6f7fa; padding: .5em; border-radius: 4px; }
"""

_SCRIPT: Final = """
(function () {
  var details = document.getElementById("details");
  function select(id) {
    var marked = document.querySelectorAll(".selected");
    for (var i = 0; i < marked.length; i++) marked[i].classList.remove("selected");
    var bars = document.querySelectorAll(".bar");
    var row = null;
    for (var j = 0; j < bars.length; j++) {
      if (bars[j].getAttribute("data-op") === id) bars[j].classList.add("selected");
    }
    var rows = document.querySelectorAll("tr[data-op]");
    for (var k = 0; k < rows.length; k++) {
      if (rows[k].getAttribute("data-op") === id) { row = rows[k]; row.classList.add("selected"); }
    }
    if (row) details.textContent = row.getAttribute("data-details");
  }
  var all = document.querySelectorAll(".bar");
  for (var n = 0; n < all.length; n++) {
    all[n].addEventListener("click", function (event) {
      select(event.currentTarget.getAttribute("data-op"));
    });
  }
  var unplaced = document.querySelectorAll(".bar.unplaced");
  document.getElementById("count").textContent =
    all.length + " operations, " + unplaced.length + " that no legal order could place";
  document.body.setAttribute("data-ready", "1");
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _rows(bars: Sequence[tuple[float, float]]) -> list[int]:
    """A row for each bar of one lane so that bars sharing a row do not overlap."""
    ends: list[float] = []
    rows = []
    for start, end in bars:
        for row, last in enumerate(ends):
            if start >= last:
                ends[row] = end
                rows.append(row)
                break
        else:
            ends.append(end)
            rows.append(len(ends) - 1)
    return rows


def render_timeline(verdict: PartitionVerdict) -> str:
    """The HTML page of one violation's ``verdict`` (see the module docstring)."""
    ops = list(verdict.minimal if verdict.minimal is not None else verdict.history)
    unplaced = {op.id for op in verdict.unplaced}
    number = {op.id: index for index, op in enumerate(ops, 1)}
    origin = min((op.invoked_ns for op in ops), default=0)
    # The axis keeps the order of the calls and returns, not their durations
    # (as Porcupine's does): every instant gets its rank, so a quick call
    # between two slow ones is as wide as they are, and a lane's calls, one
    # after another, never overlap.
    instants = sorted(
        {op.invoked_ns for op in ops} | {op.returned_ns for op in ops if op.returned_ns}
    )
    rank = {t: index for index, t in enumerate(instants)}
    slots = max(len(instants), 1)
    pending_end = 100.0

    def percent(t: int) -> float:
        return 97.0 * (rank[t] + 0.1) / slots

    lanes: dict[str, list[Operation]] = {}
    for op in ops:
        lanes.setdefault(op.process, []).append(op)
    lane_html = []
    for lane, members in lanes.items():
        members.sort(key=lambda o: (o.invoked_ns, o.id))
        spans = []
        for op in members:
            start = percent(op.invoked_ns)
            end = (
                pending_end
                if op.returned_ns is None
                else percent(op.returned_ns) + 0.8 * 97 / slots
            )
            spans.append((start, max(end, start + MIN_BAR_PERCENT)))
        rows = _rows(spans)
        bars = []
        for op, (start, end), row in zip(members, spans, rows, strict=True):
            classes = ["bar"]
            if op.id in unplaced:
                classes.append("unplaced")
            if op.returned_ns is None:
                classes.append("pending")
            title = f"#{number[op.id]} {op.call_text()} -> {answer_text(op)}"
            bars.append(
                f'<div class="{" ".join(classes)}" data-op="{_e(op.id)}" data-lane="{_e(lane)}"'
                f' data-method="{_e(op.method)}" title="{_e(title)}"'
                f' style="left:{start:.3f}%;width:{end - start:.3f}%;top:{row * 1.7 + 0.2:.1f}em">'
                f"#{number[op.id]} {_e(op.method)}</div>"
            )
        height = (max(rows, default=0) + 1) * 1.7 + 0.3
        lane_html.append(
            f'<div class="lane" data-lane="{_e(lane)}">'
            f'<div class="lane-name" title="{_e(lane)}">{_e(lane)}</div>'
            f'<div class="track" style="height:{height:.1f}em">{"".join(bars)}</div></div>'
        )
    table = []
    for op in ops:
        since = (op.invoked_ns - origin) / 1e3
        until = "pending" if op.returned_ns is None else f"{(op.returned_ns - origin) / 1e3:.1f}"
        details = (
            f"#{number[op.id]} {op.id} on {op.process}\n{op.call_text()}\n-> {answer_text(op)}"
        )
        if op.clock_ms:
            details += f"\nclock readings {list(op.clock_ms)}"
        css = ' class="unplaced"' if op.id in unplaced else ""
        table.append(
            f'<tr data-op="{_e(op.id)}" data-details="{_e(details)}"{css}>'
            f"<td>{number[op.id]}</td><td>{_e(op.id)}</td><td>{_e(op.process)}</td>"
            f"<td>[{since:.1f}, {until}]</td><td>{_e(op.call_text())}</td>"
            f"<td>{_e(answer_text(op))}</td></tr>"
        )
    explanation = []
    if verdict.explanation is not None:
        order = verdict.explanation.order
        explanation.append(f"<h2>The longest legal order found ({len(order)} of {len(ops)})</h2>")
        items = "".join(
            f"<li>#{number.get(op.id, '?')} {_e(op.method)} &rarr; {_e(result_text(result))}</li>"
            for op, result in order
        )
        explanation.append(
            f"<ol>{items}</ol>" if order else "<p>None: no operation can go first.</p>"
        )
        explanation.append("<h2>After it, every operation that could go next disagrees</h2><ul>")
        for op, result in verdict.explanation.blocked:
            explanation.append(
                f"<li>#{number.get(op.id, '?')} {_e(op.call_text())}<br>recorded "
                f"{_e(answer_text(op))}; the model answers {_e(result_text(result))}</li>"
            )
        explanation.append("</ul>")
    runs = ", ".join(verdict.runs) or "-"
    said = (verdict.reason or "").rstrip(".")
    reason = (
        f"{said}."
        if said
        else (
            "No order of these operations that respects real time is a legal run of the "
            "reference model answering what each answered."
        )
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>Violation: {_e(verdict.key)}</title>"
        f"<style>{_STYLE}</style></head>\n"
        '<body data-ready="0">\n'
        f"<h1>Not linearizable: {_e(verdict.key)}</h1>\n"
        f'<p class="reason">Runs {_e(runs)}. {_e(reason)} Times in microseconds since the first '
        "invocation in the table; the picture keeps the order of calls and returns, not their "
        "durations. Click a bar for its call and answer.</p>\n"
        '<p class="legend"><span class="placed">placed in the longest legal order</span>'
        '<span class="unplaced">no legal order could place it</span>'
        '<span id="count"></span></p>\n'
        f'<div class="timeline">{"".join(lane_html)}</div>\n'
        '<div id="details">(click a bar)</div>\n'
        "<table><thead><tr><th>#</th><th>operation</th><th>lane</th><th>[invoked, returned] us"
        "</th><th>call</th><th>answer</th></tr></thead><tbody>"
        f"{''.join(table)}</tbody></table>\n"
        f"{''.join(explanation)}\n"
        f"<script>{_SCRIPT}</script>\n"
        "</body></html>\n"
    )


def write_timeline(verdict: PartitionVerdict, path: str | os.PathLike[str]) -> Path:
    """Write ``render_timeline(verdict)`` to ``path`` (mode 0600); return its ``Path``."""
    target = Path(path)
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(render_timeline(verdict))
    return target
