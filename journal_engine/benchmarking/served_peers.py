"""The brokers `journal-engine bench --served` measures, each started for one workload and stopped after.

One class per broker, each a context manager: entering starts the broker and returns once it answers
(a STOMP CONNECT, a Redis PING), leaving stops it and waits for it, on an error or a Ctrl-C too.

* ``Served`` / ``ServedLmdb``: `journal-engine serve-stomp` on the journal / on LMDB (this package);
* ``RabbitMQ``: Debian's rabbitmq-server with its STOMP plugin (and AMQP 0-9-1, for Celery);
* ``ActiveMQ``: Debian's activemq (ActiveMQ Classic) with a STOMP connector and KahaDB;
* ``Redis``: Debian's redis-server (a Celery broker only);
* ``Coilmq``: the coilmq-based server `serve-stomp` ran before journal_engine/served/ (bench/ only).

How each is started, so that nothing of the machine's own installation is used or changed: as the
current user, from the package's files, with every file it writes (configuration, data, logs, the
Erlang cookie) in a scratch directory of the run's, on ports the kernel says are free, bound to
127.0.0.1 only. RabbitMQ gets a node name of its own, an epmd of its own on a free port, its
distribution on another, and ``HOME`` in the scratch directory; never /var/lib/rabbitmq, /etc/rabbitmq
or a running node. ActiveMQ gets an activemq.xml written for the run (a STOMP connector, KahaDB in the
scratch directory, no JMX connector, no web console, no OpenWire port), never an /etc/activemq
instance. No system service is started or stopped. Every process runs in a session of its own (so a
Ctrl-C in the terminal reaches the bench, which stops them in order) and is sent SIGTERM if the bench
dies first (PR_SET_PDEATHSIG). Stopping sends SIGTERM (each broker's clean stop), waits, then SIGKILLs
whatever is left of the process group.

What each promises when it answers a persistent SEND with a RECEIPT (``PROMISES``, and
docs/benchmarks.md) is each one's default: nothing is tuned to be faster or safer than its
documentation's default configuration, apart from the ports and directories.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .served_workload import Endpoint

START_TIMEOUT_S = 120.0          # RabbitMQ boots in 5-15 s on a busy 2-core machine; a JVM in 2-5 s
STOP_TIMEOUT_S = 60.0            # a clean stop: RabbitMQ 3 s, ActiveMQ 1.5 s; the journal's checkpoint
POLL_S = 0.1
LOG_TAIL_CHARS = 3000

PIP_HINT = "pip install '.[bench]' in the journal_engine checkout"

PROMISES = {
    "served": "RECEIPT once the message is in the journal and fdatasync'd (--sync group: the SENDs, ACKs and NACKs "
              "of one loop turn share one fdatasync)",
    "served-lmdb": "RECEIPT once the LMDB write transaction holding the message is committed and synced (one "
                   "commit per loop turn)",
    "rabbitmq": "RECEIPT once the broker confirms the message (rabbitmq_stomp defers a SEND's receipt to the "
                "publisher confirm): a persistent message (persistent:true) on a durable classic queue (/queue/NAME) "
                "is confirmed once written to the queue's index or message store and fsync'd (RabbitMQ syncs in "
                "batches), or once every queue has delivered it and had it acknowledged",
    "activemq": "RECEIPT once KahaDB has written the message to its journal and synced it (journalDiskSyncStrategy="
                "always, the default: the writes waiting at that moment share one sync), or once it was dispatched "
                "and acknowledged first (concurrentStoreAndDispatchQueues, the default, then skips the write)",
    "redis": "nothing on disk: no RDB snapshot (--save '') and no append-only file (appendonly no, Redis's default); "
             "a publish is acknowledged once in memory",
    "coilmq": "RECEIPT once the message is in the journal and fdatasync'd (coilmq's threads, one sync each)",
}


class PeerUnavailable(RuntimeError):
    """A broker that is not installed here (the message says how to install it)."""


class PeerStartError(RuntimeError):
    """A broker that did not start, or stopped by itself; the message holds the end of its log."""


# ----- processes ---------------------------------------------------------------------------------------------

def free_port() -> int:
    """A port no one listens on at this moment, on 127.0.0.1 (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the bench's process dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def dpkg_version(package: str) -> str | None:
    """The installed version of a Debian package, or None (no dpkg, not installed)."""
    if shutil.which("dpkg-query") is None:
        return None
    try:
        result = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def stomp_banner(endpoint: Endpoint, timeout_s: float = 5.0) -> str:
    """Connects, sends CONNECT and returns the CONNECTED frame's ``server`` header ('' when none);
    OSError while nothing listens, RuntimeError for an ERROR frame."""
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=timeout_s) as sock:
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:{endpoint.virtual_host}\n\n\x00".encode())
        data = b""
        while b"\x00" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionResetError("closed before answering CONNECT")
            data += chunk
    frame = data.lstrip(b"\r\n").split(b"\x00", 1)[0].decode(errors="replace")
    command, _, rest = frame.partition("\n")
    headers = dict(line.split(":", 1) for line in rest.split("\n\n", 1)[0].split("\n") if ":" in line)
    if command != "CONNECTED":
        raise RuntimeError(f"CONNECT answered {command}: {headers.get('message', '')} {rest[-200:]!r}")
    return headers.get("server", "")


def redis_ping(port: int, timeout_s: float = 5.0) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(b"PING\r\n")
        answer = sock.recv(64)
    if not answer.startswith(b"+PONG"):
        raise RuntimeError(f"PING answered {answer!r}")


def accepts(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5.0):
        pass


class _Child:
    """One process of a broker, its output in a log file, in a session of its own."""

    def __init__(self, name: str, command: list[str], *, env: dict, cwd: Path, log: Path) -> None:
        self.name = name
        self.log_path = log
        self._log = open(log, "ab")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                        env=env, cwd=str(cwd), start_new_session=True, preexec_fn=_die_with_parent)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, a wait of ``timeout_s``, then SIGKILL to what is left of its process group."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    pass
            # the group is the child's session: its own processes only (the pid is not reused while it exists)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(timeout=30)
        finally:
            self._log.close()


# ----- the brokers -------------------------------------------------------------------------------------------

class Broker:
    """A broker of the bench, started in ``scratch`` on entering, stopped on leaving."""

    name = ""
    ours = False
    debian_package: str | None = None
    speaks_stomp = True            # the STOMP workloads run on it
    celery = False                 # the Celery part runs on it

    def __init__(self, scratch: Path) -> None:
        self.scratch = Path(scratch)
        self.children: list[_Child] = []
        self.endpoint: Endpoint | None = None   # STOMP
        self.banner = ""                        # what it says of itself (STOMP's server header, ...)

    # ---- what is known before starting it

    @classmethod
    def unavailable(cls) -> str | None:
        """None when it can be started here, else why not and how to install it."""
        raise NotImplementedError

    @classmethod
    def version(cls) -> str:
        raise NotImplementedError

    @classmethod
    def promise(cls) -> str:
        return PROMISES[cls.name]

    @classmethod
    def how_started(cls) -> str:
        raise NotImplementedError

    # ---- running

    def broker_url(self) -> str:
        """Celery's broker_url for it."""
        raise NotImplementedError(f"{self.name} is no Celery broker here")

    def _start(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Broker:
        reason = self.unavailable()
        if reason is not None:
            raise PeerUnavailable(reason)
        self.scratch.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        """Every process started, newest first; waits for each."""
        while self.children:
            self.children.pop().stop()

    def _spawn(self, role: str, command: list[str], env: dict) -> _Child:
        child = _Child(f"{self.name} {role}", command, env=env, cwd=self.scratch, log=self.scratch / f"{role}.log")
        self.children.append(child)
        return child

    def _wait(self, child: _Child, what: str, check) -> object:
        """``check()``'s value once it stops raising OSError/RuntimeError; PeerStartError when the
        child ends first or START_TIMEOUT_S passes."""
        deadline = time.monotonic() + START_TIMEOUT_S
        last: Exception | None = None
        while True:
            if child.process.poll() is not None:
                raise PeerStartError(f"{child.name} exited with status {child.process.returncode} before {what}; "
                                     f"its log ({child.log_path}) ends:\n{child.log_tail()}")
            try:
                return check()
            except (OSError, RuntimeError) as error:
                last = error
            if time.monotonic() > deadline:
                raise PeerStartError(f"{child.name}: no {what} within {START_TIMEOUT_S:.0f} s (last: {last}); its "
                                     f"log ({child.log_path}) ends:\n{child.log_tail()}")
            time.sleep(POLL_S)


def _clean_env(*prefixes: str) -> dict:
    """The bench's environment without the variables a broker's scripts would read from it."""
    return {name: value for name, value in os.environ.items() if not name.startswith(prefixes)}


class Served(Broker):
    """`journal-engine serve-stomp` on the journal (this package's own server), --port 0."""

    name = "served"
    ours = True
    celery = True
    backend = "journal"

    @classmethod
    def unavailable(cls) -> str | None:
        return None

    @classmethod
    def version(cls) -> str:
        from .. import IMPLEMENTATION, __version__
        return f"journal_engine {__version__} ({IMPLEMENTATION} core)"

    @classmethod
    def how_started(cls) -> str:
        return (f"{Path(sys.executable).name} -m journal_engine serve-stomp --data SCRATCH/store --port 0 "
                f"--backend {cls.backend} (--sync group, its default)")

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "journal_engine", "serve-stomp", "--data", str(self.scratch / "store"),
                "--port", "0", "--host", "127.0.0.1", "--backend", self.backend]

    def _start(self) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
        child = self._spawn("server", self._command(), env)

        def listening() -> int:
            found = re.search(r"listening on 127\.0\.0\.1:(\d+)", child.log_tail())
            if found is None:
                raise RuntimeError("not listening yet")
            return int(found.group(1))

        self.endpoint = Endpoint(self._wait(child, "listening line", listening), counters=self.ours)
        self.banner = self._wait(child, "answer to CONNECT", lambda: stomp_banner(self.endpoint)) or self.version()

    def broker_url(self) -> str:
        return f"journal-engine://127.0.0.1:{self.endpoint.port}"


class ServedLmdb(Served):
    name = "served-lmdb"
    celery = False
    backend = "lmdb"

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import lmdb  # noqa: F401
        except ImportError as error:
            return f"the lmdb module does not import ({error}); {PIP_HINT}"
        return None


_COILMQ_SERVE = "import sys; from journal_engine.integrations.coilmq import serve; sys.exit(serve(sys.argv[1], 0))"


class Coilmq(Served):
    """The coilmq-based server (journal_engine.integrations.coilmq.serve, threads) that `serve-stomp` ran
    before journal_engine/served/; it has no counters request."""
    name = "coilmq"
    ours = False
    celery = False

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import coilmq  # noqa: F401
        except ImportError as error:
            return f"coilmq does not import ({error}); {PIP_HINT}"
        return None

    @classmethod
    def version(cls) -> str:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as package_version
        try:
            return f"coilmq {package_version('coilmq')} on journal_engine's store"
        except PackageNotFoundError:
            return "coilmq on journal_engine's store"

    @classmethod
    def how_started(cls) -> str:
        return "journal_engine.integrations.coilmq.serve(SCRATCH/store, port 0) in a child process"

    def _command(self) -> list[str]:
        return [sys.executable, "-c", _COILMQ_SERVE, str(self.scratch / "store")]


class RabbitMQ(Broker):
    """Debian's rabbitmq-server, run from its scripts in /usr/lib/rabbitmq/bin (not /usr/sbin's wrapper,
    which changes to the rabbitmq user and /var/lib/rabbitmq)."""

    name = "rabbitmq"
    debian_package = "rabbitmq-server"
    celery = True
    SCRIPTS = Path("/usr/lib/rabbitmq/bin")

    @classmethod
    def _scripts(cls) -> Path | None:
        command = shutil.which("rabbitmq-server")
        if command is None:
            return None
        if (cls.SCRIPTS / "rabbitmq-server").exists():
            return cls.SCRIPTS
        return Path(command).resolve().parent    # a generic-unix install: sbin/ holds the scripts themselves

    @classmethod
    def unavailable(cls) -> str | None:
        if cls._scripts() is None:
            return "rabbitmq-server is not installed (not on PATH): apt-get install rabbitmq-server"
        for program in ("erl", "epmd"):
            if shutil.which(program) is None:
                return f"{program} (Erlang) is not on PATH: apt-get install rabbitmq-server"
        return None

    @classmethod
    def version(cls) -> str:
        erlang = dpkg_version("erlang-base")
        return (f"RabbitMQ {dpkg_version('rabbitmq-server') or '(version unknown)'}"
                + (f", Erlang {erlang}" if erlang else ""))

    @classmethod
    def how_started(cls) -> str:
        return ("rabbitmq-server (its scripts) with RABBITMQ_NODENAME=<unique>@localhost, RABBITMQ_MNESIA_BASE, "
                "RABBITMQ_LOG_BASE, RABBITMQ_ENABLED_PLUGINS_FILE ([rabbitmq_stomp].), RABBITMQ_CONFIG_FILE "
                "(listeners.tcp and stomp.listeners.tcp on 127.0.0.1:free ports), RABBITMQ_CONF_ENV_FILE and HOME "
                "in SCRATCH; its own epmd (ERL_EPMD_PORT) and distribution port (RABBITMQ_DIST_PORT) on free "
                "loopback ports; stopped with SIGTERM (the script runs a clean stop)")

    def _start(self) -> None:
        scratch = self.scratch
        for directory in ("home", "mnesia", "log", "conf.d"):
            (scratch / directory).mkdir(exist_ok=True)
        self.stomp_port, self.amqp_port = free_port(), free_port()
        epmd_port, dist_port = free_port(), free_port()
        (scratch / "enabled_plugins").write_text("[rabbitmq_stomp].\n")
        (scratch / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{self.amqp_port}\n"
            f"stomp.listeners.tcp.local = 127.0.0.1:{self.stomp_port}\n"
            "loopback_users.guest = true\n")          # its default: guest logs in from loopback only
        (scratch / "rabbitmq-env.conf").write_text("")   # instead of /etc/rabbitmq/rabbitmq-env.conf
        env = _clean_env("RABBITMQ_", "ERL_")
        env.update({
            "HOME": str(scratch / "home"),                       # the Erlang cookie
            "RABBITMQ_NODENAME": f"journal-engine-bench-{os.getpid()}-{dist_port}@localhost",
            "RABBITMQ_MNESIA_BASE": str(scratch / "mnesia"),
            "RABBITMQ_LOG_BASE": str(scratch / "log"),
            "RABBITMQ_LOGS": "-",                                 # to the log file of the process
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(scratch / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(scratch / "rabbitmq.conf"),
            "RABBITMQ_CONFIG_FILES": str(scratch / "conf.d"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(scratch / "advanced.config"),   # absent
            "RABBITMQ_CONF_ENV_FILE": str(scratch / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(scratch / "rabbitmq.pid"),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        })
        epmd = self._spawn("epmd", [shutil.which("epmd"), "-port", str(epmd_port), "-address", "127.0.0.1"], env)
        self._wait(epmd, "epmd listening", lambda: accepts(epmd_port))
        server = self._spawn("server", [str(self._scripts() / "rabbitmq-server")], env)
        self.endpoint = Endpoint(self.stomp_port, virtual_host="/", counters=False)
        self.banner = self._wait(server, "answer to a STOMP CONNECT", lambda: stomp_banner(self.endpoint))
        self._wait(server, "AMQP listener", lambda: accepts(self.amqp_port))

    def broker_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}//"


_ACTIVEMQ_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <!-- written by the served bench of journal-engine: one STOMP connector on loopback, KahaDB with its defaults -->
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="journal-engine-bench" useJmx="false"
          persistent="true" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp"
          uri="stomp://127.0.0.1:{port}?maximumConnections=1000&amp;wireFormat.maxFrameSize=104857600"/>
    </transportConnectors>
  </broker>
</beans>
"""

_ACTIVEMQ_LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
"""

# what Debian's /usr/bin/activemq passes to a Java newer than 8
_JAVA_MODULE_OPTIONS = [
    "--add-reads=java.xml=java.logging",
    *(f"--add-opens={opening}=ALL-UNNAMED" for opening in (
        "java.base/java.security", "java.base/java.net", "java.base/java.lang", "java.base/java.util",
        "java.naming/javax.naming.spi", "java.rmi/sun.rmi.transport.tcp", "java.base/java.util.concurrent",
        "java.base/java.util.concurrent.atomic")),
    *(f"--add-exports={export}=ALL-UNNAMED" for export in (
        "java.base/sun.net.www.protocol.http", "java.base/sun.net.www.protocol.https",
        "java.base/sun.net.www.protocol.jar", "jdk.xml.dom/org.w3c.dom.html", "jdk.naming.rmi/com.sun.jndi.url.rmi")),
]
ACTIVEMQ_MEMORY_OPTIONS = ["-Xms64M", "-Xmx1G"]   # upstream's ACTIVEMQ_OPTS_MEMORY


class ActiveMQ(Broker):
    """Debian's activemq (ActiveMQ Classic): its run jar started with java, activemq.base/conf/data in
    the scratch directory and an activemq.xml of the run's."""

    name = "activemq"
    debian_package = "activemq"

    @classmethod
    def home(cls) -> Path:
        return Path(os.environ.get("ACTIVEMQ_HOME") or "/usr/share/activemq")

    @classmethod
    def unavailable(cls) -> str | None:
        if shutil.which("activemq") is None or not (cls.home() / "bin" / "activemq.jar").exists():
            return "activemq is not installed (not on PATH): apt-get install activemq"
        if shutil.which("java") is None:
            return "java is not on PATH: apt-get install default-jre-headless (ActiveMQ 5.17 needs Java 11+)"
        return None

    @classmethod
    def java_version(cls) -> str:
        try:
            result = subprocess.run([shutil.which("java") or "java", "-version"], capture_output=True, text=True,
                                    timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        found = re.search(r'version "([^"]+)"', result.stderr)
        return found.group(1) if found else "unknown"

    @classmethod
    def version(cls) -> str:
        return f"ActiveMQ Classic {dpkg_version('activemq') or '(version unknown)'}, Java {cls.java_version()}"

    @classmethod
    def how_started(cls) -> str:
        return (f"java {' '.join(ACTIVEMQ_MEMORY_OPTIONS)} -Dactivemq.base/conf/data=SCRATCH -jar "
                f"{cls.home()}/bin/activemq.jar start xbean:file:SCRATCH/conf/activemq.xml (a STOMP connector on "
                "127.0.0.1:free port, KahaDB in SCRATCH with its defaults, no JMX, no web console, no OpenWire); "
                "stopped with SIGTERM (its shutdown hook)")

    def _start(self) -> None:
        scratch = self.scratch
        conf, data, tmp = scratch / "conf", scratch / "data", scratch / "tmp"
        for directory in (conf, data, tmp):
            directory.mkdir(exist_ok=True)
        self.stomp_port = free_port()
        (conf / "activemq.xml").write_text(_ACTIVEMQ_XML.replace("{data}", str(data)).replace("{port}",
                                                                                              str(self.stomp_port)))
        (conf / "log4j.properties").write_text(_ACTIVEMQ_LOG4J)
        home = self.home()
        command = [shutil.which("java"), *ACTIVEMQ_MEMORY_OPTIONS, *_JAVA_MODULE_OPTIONS,
                   f"-Dactivemq.classpath={conf}", f"-Dactivemq.home={home}", f"-Dactivemq.base={scratch}",
                   f"-Dactivemq.conf={conf}", f"-Dactivemq.data={data}", f"-Djava.io.tmpdir={tmp}",
                   f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
                   "-jar", str(home / "bin" / "activemq.jar"), "start", f"xbean:file:{conf / 'activemq.xml'}"]
        server = self._spawn("server", command, _clean_env("ACTIVEMQ_", "JAVA_TOOL_OPTIONS"))
        self.endpoint = Endpoint(self.stomp_port, counters=False)
        self.banner = self._wait(server, "answer to a STOMP CONNECT", lambda: stomp_banner(self.endpoint))


class Redis(Broker):
    """Debian's redis-server on a free port, its directory the scratch one (a Celery broker only)."""

    name = "redis"
    debian_package = "redis-server"
    speaks_stomp = False
    celery = True

    @classmethod
    def unavailable(cls) -> str | None:
        if shutil.which("redis-server") is None:
            return "redis-server is not installed (not on PATH): apt-get install redis-server"
        return None

    @classmethod
    def version(cls) -> str:
        try:
            result = subprocess.run([shutil.which("redis-server") or "redis-server", "--version"], capture_output=True,
                                    text=True, timeout=10)
            found = re.search(r"v=(\S+)", result.stdout)
        except (OSError, subprocess.TimeoutExpired):
            found = None
        return f"Redis {found.group(1) if found else '(version unknown)'}"

    @classmethod
    def how_started(cls) -> str:
        return ("redis-server --port FREE --bind 127.0.0.1 --dir SCRATCH --save '' --appendonly no "
                "--daemonize no (no configuration file); stopped with SIGTERM")

    def _start(self) -> None:
        self.port = free_port()
        server = self._spawn("server", [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                                        "--dir", str(self.scratch), "--save", "", "--appendonly", "no",
                                        "--daemonize", "no", "--logfile", ""], _clean_env("REDIS_"))
        self._wait(server, "answer to PING", lambda: redis_ping(self.port))
        self.banner = self.version()

    def broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


BROKERS: dict[str, type[Broker]] = {broker.name: broker for broker in
                                    (Served, ServedLmdb, RabbitMQ, ActiveMQ, Redis, Coilmq)}
