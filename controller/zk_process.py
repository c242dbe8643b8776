"""A real standalone ZooKeeper server as a child process, from Debian's ``zookeeper`` package.

Used by ``kafkasim cluster up`` and by tests that need a real server. The server runs
``org.apache.zookeeper.server.ZooKeeperServerMain`` on a generated ``zoo.cfg``: bound to
127.0.0.1 only (or the one address given as ``host``), admin server off, four-letter words
limited to ``srvr`` and ``ruok``. Its files live under ``data_dir``::

    data_dir/zoo.cfg          the generated configuration
    data_dir/zookeeper.log    the JVM's stdout and stderr
    data_dir/data/            ZooKeeper's dataDir (snapshots and transaction log)

Crash story: the server is a child process; ``stop()`` ends it by its own pid (SIGTERM, then
SIGKILL after ``stop_timeout_s``), never by name. If this process exits without stopping
it, a finalizer kills it at interpreter exit; after a hard crash of this process the server
keeps running and must be killed by hand (its pid is in the log of the owner).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from kafkasim.common.errors import KafkasimError

# Debian's libzookeeper-java; its manifest's Class-Path names every dependency jar.
DEBIAN_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# ZooKeeper logs through SLF4J, which stays silent without a binding: with this one (from
# libslf4j-java, a dependency of libzookeeper-java) its log goes to zookeeper.log.
DEBIAN_SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
# Upstream's tarball layout, in case the server was unpacked there instead.
UPSTREAM_ZOOKEEPER_LIB = Path("/usr/share/zookeeper/lib")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = "apt-get install zookeeper"
LOOPBACK = "127.0.0.1"

# A small heap and a quick-starting JIT: this is a test and single-machine server.
_JVM_OPTIONS = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
)
_PORT_ATTEMPTS_MAX = 3
_LOG_TAIL_BYTES = 2000


class ZooKeeperUnavailableError(KafkasimError):
    """ZooKeeper (or Java) is not installed; the message says what to install."""


class ZooKeeperStartError(KafkasimError):
    """The server process did not come up; the message carries the tail of its log."""


class _NotServingYetError(Exception):
    pass


def _classpath() -> str | None:
    if DEBIAN_ZOOKEEPER_JAR.is_file():
        jars = [DEBIAN_ZOOKEEPER_JAR]
        if DEBIAN_SLF4J_SIMPLE_JAR.is_file():
            jars.append(DEBIAN_SLF4J_SIMPLE_JAR)
        return ":".join(str(jar) for jar in jars)
    jars = sorted(UPSTREAM_ZOOKEEPER_LIB.glob("*.jar")) if UPSTREAM_ZOOKEEPER_LIB.is_dir() else []
    if any(jar.name.startswith("zookeeper-") for jar in jars):
        return ":".join(str(jar) for jar in jars)
    return None


def zookeeper_available() -> str | None:
    """None if a ZooKeeper server can be started here, else the reason (one line, saying
    what to install)."""
    if _classpath() is None:
        return (
            f"ZooKeeper is not installed ({DEBIAN_ZOOKEEPER_JAR} not found): "
            f"run `{INSTALL_HINT}` (Debian) as root"
        )
    if shutil.which("java") is None:
        return (
            "no Java runtime on PATH (`java` not found): run "
            "`apt-get install --no-install-recommends default-jre-headless` (Debian) as root"
        )
    return None


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller retries on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def four_letter_word(port: int, word: str, timeout_s: float = 1.0, *, host: str = LOOPBACK) -> str:
    """Send a four-letter-word command to the server on ``host:port``; its answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(word.encode("ascii"))
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """End one child by its own pid: SIGTERM, then SIGKILL if it outlives ``timeout_s``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


class ZooKeeperProcess:
    """One standalone ZooKeeper server, a child of this process.

    ``port=0`` picks a free loopback port. ``tick_time_ms`` is ZooKeeper's tick (sessions
    may ask for 2..``max_session_timeout_ms``/tick ticks). ``force_sync=False`` skips the
    fsync per transaction (faster tests; a machine crash may then lose acknowledged writes).

    ``start()`` returns once the server answers ``srvr`` as a serving standalone server, or
    raises within ``start_timeout_s``. Use as a context manager (``with ZooKeeperProcess(d)
    as zk:``), which starts and stops it. Not thread-safe.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        *,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        force_sync: bool = True,
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
        detached: bool = False,
        host: str = LOOPBACK,
    ) -> None:
        if not 0 <= port < 65536:
            raise ValueError(f"port must be 0..65535, got {port}")
        self.data_dir = Path(data_dir)
        self._requested_port = port
        self._port = port
        # The one address it listens on (loopback unless brokers in network namespaces must
        # reach it through a bridge: ``cluster.netns``).
        self.host = host
        self._tick_time_ms = tick_time_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._force_sync = force_sync
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        # Detached: its own session, so it outlives this process (``kafkasim cluster up``).
        self._detached = detached
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_offset = 0  # where the current process's output starts in the log
        self._finalizer: weakref.finalize[..., ZooKeeperProcess] | None = None

    def __repr__(self) -> str:
        return f"ZooKeeperProcess({self.connect_string}, pid={self.pid})"

    @property
    def port(self) -> int:
        return self._port

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def __enter__(self) -> ZooKeeperProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the server and wait until it serves; ZooKeeperUnavailableError if it is
        not installed, ZooKeeperStartError if it does not come up."""
        if self._process is not None:
            raise ZooKeeperStartError(f"{self!r} is already started")
        reason = zookeeper_available()
        if reason is not None:
            raise ZooKeeperUnavailableError(reason)
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _PORT_ATTEMPTS_MAX + 1):
            self._port = self._requested_port or free_loopback_port()
            self._launch()
            try:
                self._wait_until_serving()
                return
            except ZooKeeperStartError:
                lost_port_race = (
                    self._requested_port == 0
                    and "Address already in use" in self._log_since_launch()
                )
                self.stop()
                if not lost_port_race or attempt == _PORT_ATTEMPTS_MAX:
                    raise
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """Terminate the server by its pid (SIGTERM, then SIGKILL); idempotent."""
        process, self._process = self._process, None
        if process is not None:
            _terminate(process, self._stop_timeout_s)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _write_config(self) -> Path:
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                (
                    f"tickTime={self._tick_time_ms}",
                    f"dataDir={(self.data_dir / 'data').resolve()}",
                    f"clientPort={self._port}",
                    f"clientPortAddress={self.host}",
                    f"maxSessionTimeout={self._max_session_timeout_ms}",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok",
                    f"forceSync={'yes' if self._force_sync else 'no'}",
                    "",
                )
            )
        )
        return config

    def _launch(self) -> None:
        classpath = _classpath()
        java = shutil.which("java")
        assert classpath is not None and java is not None  # zookeeper_available() said so
        config = self._write_config()
        self._log = self.log_path.open("ab")
        self._log_offset = self._log.tell()
        self._process = subprocess.Popen(
            [java, *_JVM_OPTIONS, "-cp", classpath, MAIN_CLASS, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=self._detached,
        )
        # If the owner forgets stop(), still end the child when the interpreter exits.
        self._finalizer = weakref.finalize(self, _terminate, self._process, self._stop_timeout_s)

    def release(self) -> int:
        """Leave the running server to itself (it is not stopped when we exit); its pid."""
        if self._process is None:
            raise ZooKeeperStartError(f"{self!r} is not running")
        pid = self._process.pid
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log is not None:
            self._log.close()
            self._log = None
        self._process = None
        return pid

    def _wait_until_serving(self) -> None:
        retrying = Retrying(
            stop=stop_after_delay(self._start_timeout_s),
            wait=wait_fixed(0.05),
            retry=retry_if_exception_type(_NotServingYetError),
            reraise=True,
        )
        try:
            retrying(self._probe)
        except _NotServingYetError:
            raise ZooKeeperStartError(
                f"ZooKeeper on {self.connect_string} not serving after "
                f"{self._start_timeout_s} s; log tail:\n{self._log_tail()}"
            ) from None

    def _probe(self) -> None:
        assert self._process is not None
        code = self._process.poll()
        if code is not None:
            raise ZooKeeperStartError(
                f"ZooKeeper exited with code {code} while starting; log tail:\n{self._log_tail()}"
            )
        try:
            answer = four_letter_word(self._port, "srvr", host=self.host)
        except OSError as e:
            raise _NotServingYetError from e
        # Before it serves, the server answers "not currently serving requests".
        if "Mode: standalone" not in answer:
            raise _NotServingYetError

    def _log_since_launch(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_bytes()[self._log_offset :].decode("utf-8", "replace")
        return ""

    def _log_tail(self) -> str:
        return self._log_since_launch()[-_LOG_TAIL_BYTES:] or "(empty log)"
