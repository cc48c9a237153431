"""The charts' time axis as a table (static/console.js's `timeTicks`, run in Chromium): for a
range and a width, the ticks sit at whole multiples of a step chosen from the range and the
room for the labels, labelled as precisely as the step needs (seconds only below a minute,
the day once the range is a day or more), so no two labels are alike and none touch."""

import re
from datetime import UTC, datetime

import pytest

from tests.e2e.conftest import ROOT

pytestmark = pytest.mark.e2e

T0 = int(datetime(2026, 11, 2, tzinfo=UTC).timestamp())
HOUR, DAY = 3600, 86400
HMS = r"\d\d:\d\d:\d\d"
HM = r"\d\d:\d\d"
DHM = r"\d\d-\d\d \d\d:\d\d"
D = r"\d\d-\d\d"
YMD = r"\d{4}-\d\d-\d\d"
TICK_FONT = "12px system-ui, -apple-system, 'Segoe UI', sans-serif"
GAP = 16

CASES = [
    # (what, from, to, width px, label pattern, at least so many labels)
    ("a minute of samples", T0, T0 + 60, 300, HMS, 3),
    ("the step-rate chart's 10 minutes", T0, T0 + 600, 300, HM, 3),
    ("ten minutes on a phone", T0, T0 + 600, 200, HM, 2),
    ("a day by hour", T0, T0 + 23 * HOUR, 500, HM, 6),
    ("a day by hour, wide", T0, T0 + 23 * HOUR, 1400, HM, 20),
    ("across midnight", T0 - 2 * HOUR, T0 + 2 * HOUR, 300, HM, 4),
    ("a day and a half", T0, T0 + 36 * HOUR, 600, DHM, 3),
    ("the week view by hour", T0, T0 + 7 * DAY - HOUR, 500, D, 5),
    ("the week view on a phone", T0, T0 + 7 * DAY - HOUR, 300, D, 3),
    ("a month by day", T0, T0 + 29 * DAY, 400, D, 3),
    ("thirteen months by day", T0, T0 + 400 * DAY, 600, YMD, 3),
    ("two seconds", T0, T0 + 2, 300, HMS, 3),
]

RUN = """([from, to, width, font]) => {
    const found = GpuConsole.timeTicks(from, to, width);
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = font;
    const widest = Math.max(...found.labels.map(l => ctx.measureText(l).width));
    return {...found, widest};
}"""


@pytest.fixture(scope="module")
def page(browser):
    page = browser.new_page()
    page.set_content("<!doctype html><html lang='en'><title>axis</title><body></body></html>")
    page.add_script_tag(path=str(ROOT / "static" / "console.js"))
    yield page
    page.close()


@pytest.mark.parametrize(("what", "start", "end", "width", "pattern", "least"), CASES)
def test_time_ticks(page, what, start, end, width, pattern, least):
    found = page.evaluate(RUN, [start, end, width, TICK_FONT])
    ticks, labels, step = found["ticks"], found["labels"], found["step"]
    assert all(re.fullmatch(pattern, label) for label in labels), (what, labels)
    assert len(labels) == len(set(labels)) >= least, (what, labels)
    assert all(t % step == 0 for t in ticks), (what, step, ticks)  # whole multiples (UTC)
    assert start <= ticks[0] < start + step and ticks[-1] <= end < ticks[-1] + step
    spacing = step / (end - start) * width  # px between two labels' centres
    assert spacing >= found["widest"] + GAP, (what, spacing, found["widest"])


def test_a_single_instant_has_one_label(page):
    found = page.evaluate(RUN, [T0 + 5, T0 + 5, 300, TICK_FONT])
    assert found["labels"] == ["00:00:05"]


def test_the_labels_are_exactly_these(page):
    day = page.evaluate(RUN, [T0, T0 + 23 * HOUR, 1400, TICK_FONT])
    assert day["labels"] == [f"{h:02d}:00" for h in range(24)]
    midnight = page.evaluate(RUN, [T0 - 2 * HOUR, T0 + 2 * HOUR, 300, TICK_FONT])
    assert midnight["labels"] == ["22:00", "23:00", "00:00", "01:00", "02:00"]
    week = page.evaluate(RUN, [T0, T0 + 7 * DAY - HOUR, 500, TICK_FONT])
    assert week["labels"] == ["11-02", "11-03", "11-04", "11-05", "11-06", "11-07", "11-08"]
