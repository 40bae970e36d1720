"""Run a real single-node Apache Kafka (KRaft) broker on loopback without Docker.

The broker's jars come from Maven Central (``org.apache.kafka:kafka_2.13``) via ``mvn
dependency:copy-dependencies`` into ``<home>/kafka/<version>/libs``, outside the repository. Each broker
instance has a name and a directory ``<home>/kafka/brokers/<name>`` holding its config, data, log and a
``state.json`` (pid, ports) so that ``start``, ``status`` and ``stop`` can run from different processes.

``start`` after ``stop`` is a restart: the same data directory (topics, records, committed offsets) and the
same ports, recorded in ``broker.json``, so that a worker or sink configured with the old address finds its
data again. Only :meth:`LocalKafka.wipe` (``driftlog kafka wipe``) deletes the data and forgets the ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from streams.errors import BrokerError, LauncherError
from streams.kafka.admin import wait_until_ready
from streams.supervise import free_port, port_free

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.driftlog</groupId><artifactId>kafka-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version></dependency>
{logging}
  </dependencies>
</project>
"""
_LOGGING_3 = """    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId>
      <version>1.7.36</version></dependency>"""
_LOGGING_4 = """    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>2.24.3</version></dependency>"""

_SERVER_PROPERTIES = """process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
message.max.bytes=8388608
"""

# a broker whose data holds this many topic partitions may still be loading them when its start stops waiting
# (78,000 of them, left by benchmarks, took longer than 90 s): then that, not a bootstrap error, is the news
LOADING_PARTITIONS = 1000

_LOG4J_3 = """log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
_LOG4J_4 = """Configuration:
  Appenders:
    File: {{name: file, fileName: "{log}", PatternLayout: {{pattern: "[%d] %p %m (%c)%n"}}}}
  Loggers:
    Root: {{level: WARN, AppenderRef: [{{ref: file}}]}}
"""


@dataclass(frozen=True)
class BrokerState:
    """What ``state.json`` records about a running broker."""

    pid: int
    port: int
    controller_port: int
    version: str
    log: str

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


class LocalKafka:
    """A named local broker instance under ``home``."""

    def __init__(self, home: Path, version: str, name: str = "default") -> None:
        self.home = home
        self.version = version
        self.name = name
        self.dir = home / "brokers" / name
        self.libs = home / version / "libs"

    @classmethod
    def running(cls, home: Path, version: str) -> list[LocalKafka]:
        """Every named broker under ``home`` whose process is alive, by name."""
        found = sorted(p.name for p in (home / "brokers").glob("*") if (p / "state.json").exists())
        return [b for b in (cls(home, version, n) for n in found) if b.state() is not None]

    # -- jars ------------------------------------------------------------------------------------------
    def ensure_jars(self) -> Path:
        """Fetch the broker's jars with Maven once; later calls reuse the cache."""
        marker = self.libs / ".complete"
        if marker.exists():
            return self.libs
        mvn, java = shutil.which("mvn"), shutil.which("java")
        if not mvn or not java:
            raise LauncherError(
                "the local Kafka broker needs Java 17+ and Maven on PATH "
                f"(java: {java or 'missing'}, mvn: {mvn or 'missing'}); "
                "or set KAFKA_BOOTSTRAP_SERVERS to use an existing cluster"
            )
        work = self.libs.parent
        work.mkdir(parents=True, exist_ok=True)
        logging_deps = _LOGGING_4 if _major(self.version) >= 4 else _LOGGING_3
        (work / "pom.xml").write_text(_POM.format(version=self.version, logging=logging_deps))
        staging = work / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(work / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            raise LauncherError(
                f"Maven could not fetch Apache Kafka {self.version} ({' '.join(cmd)}):\n" + "\n".join(tail)
            )
        shutil.rmtree(self.libs, ignore_errors=True)
        staging.rename(self.libs)
        marker.write_text(self.version)
        return self.libs

    # -- lifecycle -------------------------------------------------------------------------------------
    def state(self) -> BrokerState | None:
        """The recorded state if that broker process is still alive, else None."""
        path = self.dir / "state.json"
        try:
            state = BrokerState(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return state if process_alive(state.pid) else None

    def start(self, timeout: float = 90.0) -> BrokerState:
        """Start the broker (or find the one already running) and return once it accepts produce/consume.
        One still loading many partitions when ``timeout`` runs out is left running (it comes up once it
        has loaded them): the error says so, and what to do."""
        running = self.state()
        if running is not None:
            try:
                asyncio.run(wait_until_ready(running.bootstrap, timeout))
            except BrokerError as exc:
                raise self._still_loading(timeout) or exc from None
            return running
        libs = self.ensure_jars()
        java = shutil.which("java") or "java"
        data = self.dir / "data"
        port, controller_port = self._ports()
        data.mkdir(parents=True, exist_ok=True)
        log = self.dir / "broker.log"
        props = self.dir / "server.properties"
        props.write_text(_SERVER_PROPERTIES.format(port=port, controller_port=controller_port, data=data))
        if _major(self.version) >= 4:
            (self.dir / "log4j2.yaml").write_text(_LOG4J_4.format(log=log))
            log_opt = f"-Dlog4j2.configurationFile={self.dir / 'log4j2.yaml'}"
        else:
            (self.dir / "log4j.properties").write_text(_LOG4J_3.format(log=log))
            log_opt = f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}"
        base = [java, "-Xms256m", "-Xmx1g", log_opt, "-cp", f"{libs}/*"]
        if not (data / "meta.properties").exists():  # a new broker; a restarted one keeps its data
            fmt = subprocess.run(
                [*base, "kafka.tools.StorageTool", "format", "-t", "driftlog-local-cluster0", "-c", str(props)],
                capture_output=True,
                text=True,
                check=False,
            )
            if fmt.returncode != 0:
                raise LauncherError(f"formatting KRaft storage failed: {(fmt.stdout + fmt.stderr).strip()[-2000:]}")
        with open(self.dir / "stdout.log", "wb") as out:
            proc = subprocess.Popen(
                [*base, "kafka.Kafka", str(props)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        state = BrokerState(proc.pid, port, controller_port, self.version, str(log))
        (self.dir / "state.json").write_text(json.dumps(asdict(state)))
        try:
            asyncio.run(self._wait(state, proc, timeout))
        except BaseException as exc:
            loading = self._still_loading(timeout) if proc.poll() is None and isinstance(exc, BrokerError) else None
            if loading is not None:
                raise loading from None
            self.stop()
            raise
        return state

    def _still_loading(self, waited: float) -> LauncherError | None:
        """The error for a broker not ready after ``waited`` s whose data holds ``LOADING_PARTITIONS`` or more."""
        held = partition_dirs(self.dir / "data")
        return LauncherError(still_loading(self.name, held, waited)) if held >= LOADING_PARTITIONS else None

    def _ports(self) -> tuple[int, int]:
        """The ports this broker had before (a restart keeps its address), else two free ones, recorded."""
        recorded = self.dir / "broker.json"
        try:
            known = json.loads(recorded.read_text())
            port, controller_port = int(known["port"]), int(known["controller_port"])
        except (OSError, ValueError, KeyError, TypeError):
            port, controller_port = free_port(), free_port()
            self.dir.mkdir(parents=True, exist_ok=True)
            recorded.write_text(json.dumps({"port": port, "controller_port": controller_port}))
            return port, controller_port
        for p in (port, controller_port):
            if not port_free(p):
                raise LauncherError(
                    f"broker {self.name!r} restarts on its port {p}, which another process now uses: stop that "
                    f"process, or `driftlog kafka wipe --name {self.name}` to start afresh (data deleted, new ports)"
                )
        return port, controller_port

    def wipe(self) -> bool:
        """Stop the broker if it runs and delete its data and recorded ports. True if there was anything."""
        self.stop()
        existed = self.dir.exists()
        shutil.rmtree(self.dir, ignore_errors=True)
        return existed

    async def _wait(self, state: BrokerState, proc: subprocess.Popen[bytes], timeout: float) -> None:
        waiter = asyncio.ensure_future(wait_until_ready(state.bootstrap, timeout))
        while not waiter.done():
            if proc.poll() is not None:
                waiter.cancel()
                raise LauncherError(
                    f"the Kafka broker exited with code {proc.returncode} during start-up; "
                    f"see {self.dir / 'stdout.log'} and {state.log}:\n{self._tail()}"
                )
            await asyncio.sleep(0.2)
        waiter.result()

    def _tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("stdout.log", "broker.log"):
            try:
                text += (self.dir / name).read_text(errors="replace")
            except OSError:
                continue
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker and everything in its process group. True if one was running."""
        path = self.dir / "state.json"
        try:
            pid = int(json.loads(path.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        was_alive = process_alive(pid)
        if was_alive:
            _signal_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
                _reap(pid)
            if process_alive(pid):
                _signal_group(pid, signal.SIGKILL)
                while process_alive(pid):
                    time.sleep(0.05)
                    _reap(pid)
        path.unlink(missing_ok=True)
        return was_alive


def partition_dirs(data: Path) -> int:
    """The topic partitions a broker's data directory holds (a directory ``<topic>-<partition>`` each)."""
    if not data.is_dir():
        return 0
    return sum(1 for d in data.iterdir() if d.name.rpartition("-")[2].isdigit() and d.is_dir())


def still_loading(name: str, partitions: int, waited: float) -> str:
    """What ``driftlog kafka start`` says of a broker not ready after ``waited`` s with ``partitions`` to load."""
    return (f"broker {name!r} is still loading {partitions:,} partitions after {waited:.0f}s: wait, and run "
            f"`driftlog kafka start --name {name}` again; or `driftlog kafka wipe --name {name}` to start afresh "
            "(every topic deleted)")  # fmt: skip


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
