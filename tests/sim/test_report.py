"""The HTML report of simulated runs: the catalog's leader-crash, unsafe-acks1-leader-crash and
unsafe-unclean-election, rendered whole. Each page names what the run did (the fault windows,
the leaders and their epochs, the lost range, the truncation, the unclean election), every
figure is a valid Plotly figure, and the page loads nothing from the network. One test opens a
page in Debian's headless Chromium and saves a screenshot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest

from kafkasim.faults import checker, reading, runner
from kafkasim.faults.history import History
from kafkasim.faults.report import figure_partition, figure_throughput, render
from kafkasim.faults.report_series import derive
from kafkasim.sim.backend import SIM

pytestmark = pytest.mark.slow

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, History]:
    names = ("leader-crash", "unsafe-acks1-leader-crash", "unsafe-unclean-election")
    return {
        name: runner.run(
            reading.load(reading.find(name)), SIM, tmp_path_factory.mktemp(name), seed=1
        )
        for name in names
    }


def _page(history: History) -> str:
    return render(history, checker.check(history))


def _no_network(page: str) -> None:
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*['\"]?https?:", page, re.IGNORECASE)


def test_every_figure_of_a_run_is_a_valid_plotly_figure(runs: dict[str, History]) -> None:
    for history in runs.values():
        series = derive(history, checker.check(history))
        go.Figure(figure_throughput(series))  # raises on any unknown property or bad value
        for partition in series.partitions:
            go.Figure(figure_partition(series, partition))


def test_a_leader_crash_report_shows_who_led_when_and_the_isr_steps(
    runs: dict[str, History],
) -> None:
    page = _page(runs["leader-crash"])
    _no_network(page)
    assert "<title>kafkasim run: leader-crash, seed 1</title>" in page
    assert "VERDICT: SAFE" in page
    assert "leader 1, epoch 0" in page and "leader 3, epoch 1" in page
    assert "broker 1 in the ISR" in page and "ISR {2, 3}" in page
    assert "crash leader:events-0" in page
    assert "UNCLEAN" not in page and "acknowledged records lost" not in page


def test_an_acks1_report_marks_the_lost_range_and_the_old_leader_s_truncation(
    runs: dict[str, History],
) -> None:
    page = _page(runs["unsafe-acks1-leader-crash"])
    _no_network(page)
    assert "kafkasim run: unsafe-acks1-leader-crash, seed 1" in page
    assert "VERDICT: DATA LOST" in page
    lost = re.search(r"acknowledged records lost: offsets (\d+) to (\d+) \((\d+) records\)", page)
    assert lost is not None, "no lost range named"
    first, last, records = map(int, lost.groups())
    assert last - first + 1 == records > 0
    assert f"broker 1 truncated (inferred from the lost records): log end {last + 1}" in page
    # Two overlapping fault windows, each in its own labelled lane.
    assert '"faults 1"' in page and '"faults 2"' in page
    assert "split leader:events-0" in page


def test_an_unclean_election_is_named_on_the_report(runs: dict[str, History]) -> None:
    page = _page(runs["unsafe-unclean-election"])
    _no_network(page)
    assert re.search(r"unclean election: broker \d leads epoch \d+ \(ISR was \{\d\}\)", page)
    assert "UNCLEAN election: elected from outside the ISR" in page
    assert "reads later overwritten: offsets" in page


def test_a_report_draws_in_headless_chromium(runs: dict[str, History], tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), "./dev installs chromium, chromium-driver"
    report = tmp_path / "unclean.html"
    report.write_text(_page(runs["unsafe-unclean-election"]))
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1300,2900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(report.as_uri())
        drawn = driver.execute_script(
            "return Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".map(function(d){return d.textContent;});"
        )
        driver.save_screenshot(str(tmp_path / "unclean.png"))
    finally:
        driver.quit()
    assert len(drawn) == 2  # throughput, events-0: Plotly drew both
    assert any("epoch 3 UNCLEAN" in text for text in drawn)
    assert any("unclean election" in text for text in drawn)
    assert (tmp_path / "unclean.png").stat().st_size > 10_000
    json.dumps(drawn)  # plain strings came back from the page
