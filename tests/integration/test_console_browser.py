"""The console in a real browser: Debian's headless Chromium driven by Selenium (no browser
downloads), against a real 3-broker local cluster, and over a replayed simulation run.
Screenshots go to the test's tmp dir. Skipped with one line when Chromium or its driver is
missing."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvicorn

from kafkasim.cli.console import live_console
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.chaos import LocalBackend
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.console.replay import Replay
from kafkasim.console.server import LiveConsole, ReplayConsole, create_app
from kafkasim.faults import runner
from kafkasim.faults.reading import find, load
from kafkasim.sim.backend import SIM
from tests.cli_run import cluster_up

pytestmark = pytest.mark.slow

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SESSION_TIMEOUT_S = 6.0


@pytest.fixture
def browser() -> Iterator[object]:
    if not (shutil.which(CHROMIUM) and shutil.which(DRIVER)):
        pytest.skip("Debian's chromium and chromium-driver are not installed (./dev setup)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1800",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def serve() -> Iterator[Callable[[LiveConsole | ReplayConsole], str]]:
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(console: LiveConsole | ReplayConsole) -> str:
        config = uvicorn.Config(create_app(console), host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "the console did not start"
            time.sleep(0.05)
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(20)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not seen within {timeout_s} s: {what}"
        time.sleep(0.2)


def attr(driver: object, css: str, name: str) -> str | None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        value = driver.find_element(By.CSS_SELECTOR, css).get_attribute(name)  # type: ignore[attr-defined]
    except WebDriverException:
        return None
    return value


def press_after_redraws(driver: object, element_id: str) -> None:
    """Find a button, let the page draw two more views, then press it: the rows are updated in
    place, so the button found is still the one on the page (it was rebuilt on every view once,
    and a press could land on a button just replaced; CI saw it as a stale element)."""
    from selenium.webdriver.common.by import By

    button = driver.find_element(By.ID, element_id)  # type: ignore[attr-defined]
    before = int(attr(driver, "body", "data-updates") or 0)
    wait_for(
        "two more views drawn",
        lambda: int(attr(driver, "body", "data-updates") or 0) >= before + 2,
        20,
    )
    button.click()


def attr_once(
    driver: object, css: str, name: str, accept: Callable[[str], bool], timeout_s: float
) -> str:
    """The attribute's value once ``accept`` takes it. The page redraws its rows every second,
    so a single read can land between a row's removal and its redrawing (a stale element:
    None), as it did once in CI right after the full ISR was seen."""
    seen: list[str] = []

    def taken() -> bool:
        value = attr(driver, css, name)
        if value is not None and accept(value):
            seen.append(value)
            return True
        return False

    wait_for(f"{css} {name} accepted", taken, timeout_s)
    return seen[-1]


def test_kill_and_restart_the_leader_from_the_page(
    tmp_path: Path, browser: object, serve: Callable[[LiveConsole | ReplayConsole], str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser
    with cluster_up(
        tmp_path / "cluster",
        "--brokers",
        "3",
        "--override",
        f"zookeeper.session.timeout.ms={int(SESSION_TIMEOUT_S * 1000)}",
    ) as root:
        console = live_console(root)

        async def create() -> None:
            transport = GrpcTransport()
            try:
                admin = MinimalClient(transport, console.source.target.bootstrap(), SystemClock())  # type: ignore[attr-defined]
                await admin.create_topic("watched", 1, 3, {"min.insync.replicas": "2"})
                await admin.wait_for_leaders("watched", 1)
            finally:
                await transport.close()

        asyncio.run(create())
        url = serve(console)
        driver.get(url)  # type: ignore[attr-defined]
        part = "#part-watched-0"
        wait_for(
            "3 brokers",
            lambda: len(driver.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")) == 3,
            20,
        )  # type: ignore[attr-defined]
        wait_for("the full ISR", lambda: attr(driver, part, "data-isr") == "1,2,3", 20)
        driver.save_screenshot(str(tmp_path / "1-healthy.png"))  # type: ignore[attr-defined]
        leader = int(attr_once(driver, part, "data-leader", lambda v: v in ("1", "2", "3"), 20))

        ages = [int(attr(driver, "#latency", "data-age-ms") or 0) for _ in range(3)]
        requests_before = console.source.requests
        started = time.monotonic()
        time.sleep(5)
        rate = (console.source.requests - requests_before) / (time.monotonic() - started)
        print(f"console load: {rate:.1f} requests/s on the cluster; view age {ages} ms")

        # The built-in workload: acks=1 with a consumer, judged live by the history checker.
        Select(driver.find_element(By.ID, "wl-topic")).select_by_value("watched")  # type: ignore[attr-defined]
        Select(driver.find_element(By.ID, "wl-acks")).select_by_value("1")  # type: ignore[attr-defined]
        rate = driver.find_element(By.ID, "wl-rate")  # type: ignore[attr-defined]
        rate.clear()
        rate.send_keys("200")
        driver.find_element(By.ID, "wl-start").click()  # type: ignore[attr-defined]
        wait_for(
            "the workload running",
            lambda: attr(driver, "#wl-status", "data-state") == "running",
            10,
        )
        wait_for(
            "a live verdict", lambda: attr(driver, "#wl-verdict", "data-verdict") == "SAFE", 20
        )
        driver.save_screenshot(str(tmp_path / "1b-workload.png"))  # type: ignore[attr-defined]

        press_after_redraws(driver, f"fault-kill-{leader}")
        driver.switch_to.alert.accept()  # type: ignore[attr-defined]
        limit = SESSION_TIMEOUT_S + 15
        wait_for(
            "the leader's broker down",
            lambda: attr(driver, f"#broker-{leader}", "data-process") == "down",
            limit,
        )
        wait_for(
            "a new leader",
            lambda: attr(driver, part, "data-leader") not in (str(leader), "-1", None),
            limit,
        )
        wait_for(
            "the ISR shrunk",
            lambda: str(leader) not in (attr(driver, part, "data-isr") or str(leader)),
            limit,
        )
        kinds = {
            e.get_attribute("data-kind")
            for e in driver.find_elements(By.CSS_SELECTOR, "#timeline li")
        }  # type: ignore[attr-defined]
        assert {"fault", "election", "isr_shrink", "workload", "verdict"} <= kinds, kinds
        driver.save_screenshot(str(tmp_path / "2-leader-killed.png"))  # type: ignore[attr-defined]

        # Stop: a final read, then the final verdict over everything sent and read. Whether
        # acks=1 lost records depends on what the followers had fetched when the leader died.
        driver.find_element(By.ID, "wl-stop").click()  # type: ignore[attr-defined]
        wait_for(
            "the final verdict", lambda: attr(driver, "#wl-verdict", "data-final") == "true", 40
        )
        verdict = attr_once(driver, "#wl-verdict", "data-verdict", lambda v: v != "", 10)
        assert verdict in ("SAFE", "DATA LOST"), verdict
        assert "acknowledged" in driver.find_element(By.ID, "wl-verdict").text  # type: ignore[attr-defined]
        print("workload verdict:", driver.find_element(By.ID, "wl-verdict").text.splitlines()[0])  # type: ignore[attr-defined]
        driver.save_screenshot(str(tmp_path / "2b-verdict.png"))  # type: ignore[attr-defined]

        press_after_redraws(driver, f"fault-restart-{leader}")
        driver.switch_to.alert.accept()  # type: ignore[attr-defined]
        wait_for(
            "the ISR expanded",
            lambda: attr(driver, part, "data-isr") == "1,2,3",
            SESSION_TIMEOUT_S + 40,
        )
        kinds = {
            e.get_attribute("data-kind")
            for e in driver.find_elements(By.CSS_SELECTOR, "#timeline li")
        }  # type: ignore[attr-defined]
        assert "isr_expand" in kinds
        driver.save_screenshot(str(tmp_path / "3-restarted.png"))  # type: ignore[attr-defined]
    # The broker the page restarted is a child of this process ('cluster down' stopped it by
    # its pid): reap it, or its Popen warns when collected, in whichever test runs next.
    backend = console.injector.backend
    assert isinstance(backend, LocalBackend)
    for broker in backend.cluster.brokers.values():
        if broker.process is not None:
            broker.process.wait(timeout=30)


def test_replay_of_a_simulated_leader_crash(
    tmp_path: Path, browser: object, serve: Callable[[LiveConsole | ReplayConsole], str]
) -> None:
    from selenium.webdriver.common.by import By

    history = runner.run(load(find("leader-crash")), SIM, tmp_path, seed=1)
    replay = Replay(history)
    crash = next(f for f in history.faults if f.action == "crash")
    before_ms = (crash.start_ms // 1000 - 1) * 1000
    after_ms = (crash.start_ms // 1000 + 2) * 1000
    leader_before = replay.view_at(before_ms)["topics"][0]["partitions"][0]["leader"]
    driver = browser
    driver.get(serve(ReplayConsole(replay)))  # type: ignore[attr-defined]
    wait_for("the replay page", lambda: attr(driver, "body", "data-replay-t") == "0", 20)

    def step(t_ms: int) -> None:
        driver.execute_script(  # type: ignore[attr-defined]
            "const s = document.getElementById('slider'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('input'));",
            t_ms,
        )
        wait_for(
            f"the view at {t_ms} ms", lambda: attr(driver, "body", "data-replay-t") == str(t_ms), 10
        )

    # The view before the crash (at 0 ms the sampler may not have answered yet).
    topic = replay.view_at(before_ms)["topics"][0]["name"]
    part = f"#part-{topic}-0"
    step(before_ms)
    assert attr(driver, part, "data-leader") == str(leader_before)
    driver.save_screenshot(str(tmp_path / "replay-before.png"))  # type: ignore[attr-defined]
    step(after_ms)
    assert attr(driver, part, "data-leader") not in (str(leader_before), None)
    assert str(leader_before) not in (attr(driver, part, "data-isr") or "")
    assert attr(driver, f"#broker-{leader_before}", "data-process") == "down"
    kinds = {
        e.get_attribute("data-kind") for e in driver.find_elements(By.CSS_SELECTOR, "#timeline li")
    }  # type: ignore[attr-defined]
    assert {"fault", "election", "isr_shrink"} <= kinds, kinds
    assert driver.find_element(By.ID, "verdict").text  # type: ignore[attr-defined]
    driver.save_screenshot(str(tmp_path / "replay-after.png"))  # type: ignore[attr-defined]
