"""A single-node Slurm cluster of the tests' own on 127.0.0.1 (standard library only).

`SlurmCluster` runs Debian's munged, slurmctld and slurmd (``scripts/install_slurm.sh``) with a
generated key, configuration, free ports, state and logs in one directory; client commands and
jobs find it through ``SLURM_CONF`` (`SlurmCluster.env`). Nothing under /etc is read or written,
and the system's munge or Slurm services, where they run, are neither used nor disturbed.

Timing (Slurm 22.05, measured): the node is idle about 1 s after `start` begins; a submitted
job starts within a second (2 s for the first). Slurm sends an ``sbatch --signal`` warning only
from the controller's time-limit check, which runs every 30 s counted from the controller's
start (so the first job warned on a new cluster waits about 25 s): see `warning_options`. A
requeued job may start again ``cred_expire + 1`` s after the requeue (``cred_expire`` is set to
its minimum, 5) and does so at the next scheduling pass (``sched_interval=1``; the default, 60,
kept it pending for a minute).

Example:
    >>> with SlurmCluster(tmp_path / "slurm") as cluster:
    ...     job_id = cluster.sbatch("#!/bin/sh\\necho hello\\n", cwd=tmp_path)
    ...     info = cluster.wait(job_id)
    ...     assert info["JobState"] == "COMPLETED"
    ...     assert cluster.output(job_id).read_text() == "hello\\n"
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
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

INSTALL_HINT = "run scripts/install_slurm.sh (apt-get install slurm-wlm munge, as root)"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "squeue", "scancel")
FINISHED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
# Slurm's time-limit check (slurmctld's PERIODIC_TIMEOUT): --signal warnings are sent from it.
TIME_LIMIT_CHECK_S = 30
# The smallest AuthInfo cred_expire Slurm accepts; a requeued job waits cred_expire + 1 s.
CRED_EXPIRE_S = 5
# Variables of an enclosing Slurm job (a CI runner inside one) that must not reach our clients.
_FOREIGN_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SCONTROL_")
# sockaddr_un's sun_path holds 108 bytes with the terminating NUL
_SOCKET_PATH_MAX = 107
# "Key=value Key=value ..." of `scontrol show -o`; values may contain "=" (TRES=cpu=1,node=1)
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=")


class SlurmError(RuntimeError):
    """The cluster did not start, a client command failed, or a job did not get where expected."""


def _search_path() -> str:
    # the daemons live in /usr/sbin, which is not on every user's PATH
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin"])


def _which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=_search_path() if path is None else path)


def slurm_unavailable(path: str | None = None) -> str | None:
    """Why a `SlurmCluster` cannot run here, or ``None`` when it can.

    It needs munged, slurmctld, slurmd and the client commands, and root (slurmd starts jobs
    as their user).

    Args:
        path: Where to look for the commands (``os.pathsep``-separated); by default ``PATH``
            and the sbin directories.
    """
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name, path) is None]
    if missing:
        return f"the Slurm tests need {', '.join(missing)}, not found: {INSTALL_HINT}"
    if os.geteuid() != 0:
        return f"the Slurm tests need root to run slurmd (running as uid {os.geteuid()})"
    return None


def finished(info: Mapping[str, str]) -> bool:
    """Whether the job of ``info`` (`SlurmCluster.job`) has ended (the default of `wait`)."""
    return info.get("JobState") in FINISHED_STATES


def warning_options(after: int = 3, *, signal_name: str = "USR1", minutes: int = 1) -> list[str]:
    """``sbatch`` options that send ``signal_name`` to the batch shell early in the job.

    Slurm checks time limits every 30 s (from slurmctld's start) and sends a ``--signal``
    warning at the first check where ``now + 30 s >= end - warning``. With
    ``--time=minutes`` and ``--signal=B:SIG@(60*minutes - 30 - after)`` the signal arrives
    between ``after`` and ``after + 30`` seconds after the job starts (less up to 1 s: Slurm
    counts the start in whole seconds), never sooner: give the program that long to install
    its handler, since an early signal kills it. The job is killed ``60*minutes`` seconds
    after its start.

    Args:
        after: Earliest second after the start, 0 to 29.
        signal_name: Signal name without ``SIG``.
        minutes: The job's time limit (at least 1).

    Example:
        >>> cluster.sbatch(script, "--requeue", *warning_options(3), cwd=tmp_path)
    """
    warning = 60 * minutes - TIME_LIMIT_CHECK_S - after
    if minutes < 1 or not 0 <= after < TIME_LIMIT_CHECK_S:
        message = (
            f"warning_options needs minutes >= 1 and 0 <= after < {TIME_LIMIT_CHECK_S}, "
            f"got after={after}, minutes={minutes}"
        )
        raise ValueError(message)
    return [f"--time={minutes}", f"--signal=B:{signal_name}@{warning}"]


def parse_fields(line: str) -> dict[str, str]:
    """The ``Key=value`` fields of one line of ``scontrol show -o``."""
    matches = list(_FIELD.finditer(line))
    ends = [match.start() for match in matches[1:]] + [len(line)]
    return {match.group(1): line[match.end() : end].strip() for match, end in zip(matches, ends)}


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"({error.strerror}: {path})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


class SlurmCluster:
    """munged, slurmctld and slurmd of one node, everything in ``directory``.

    Args:
        directory: Created if missing; holds the key, ``slurm.conf``, state, spool and the
            daemons' logs (``<daemon>.log``, their stderr in ``<daemon>.stderr``).
        start_timeout: Seconds that `start` waits for the node to be idle.
    """

    def __init__(self, directory: str | os.PathLike[str], *, start_timeout: float = 60.0) -> None:
        self.directory = Path(directory).resolve()
        self.conf = self.directory / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        self.start_timeout = start_timeout
        self._munge_socket = self.directory / "munge.socket"
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    # -- life cycle

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def env(self) -> dict[str, str]:
        """The environment for client commands and the jobs: this process's, without the
        variables of an enclosing Slurm job, and ``SLURM_CONF``."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
        return {**inherited, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        """Start the daemons and wait until the node is idle.

        Raises:
            SlurmError: Slurm is not usable here (`slurm_unavailable`), or a daemon exited or
                the node was not idle within ``start_timeout``; the message holds the daemons'
                log tails. The daemons started are stopped.
        """
        if self._processes:
            message = f"the Slurm cluster in {self.directory} is already started"
            raise SlurmError(message)
        reason = slurm_unavailable()
        if reason is not None:
            raise SlurmError(reason)
        if len(str(self._munge_socket)) > _SOCKET_PATH_MAX:
            message = (
                f"the Slurm cluster's directory {self.directory} is too long a path for munged's "
                f"socket (at most {_SOCKET_PATH_MAX - len('/munge.socket')} characters)"
            )
            raise SlurmError(message)
        for attempt in range(3):
            try:
                self._start_once()
                return
            except SlurmError as error:
                self.stop()
                # a port picked as free may be taken before the daemon binds it: pick again
                if attempt == 2 or "Address already in use" not in str(error):
                    raise

    def stop(self) -> None:
        """Stop the daemons and whatever runs under them (jobs included); idempotent."""
        for name in reversed(DAEMONS):
            process = self._processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # slurmstepd and the jobs outlive slurmd; all carry this cluster's SLURM_CONF
        deadline = time.monotonic() + 10
        while (leftovers := self.processes()) and time.monotonic() < deadline:
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def processes(self) -> list[int]:
        """The ids of the processes (other than this one) whose environment names this
        cluster's ``SLURM_CONF``: its daemons, slurmstepd and the jobs."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                variables = (entry / "environ").read_bytes().split(b"\0")
            except OSError:  # gone, or not ours to read
                continue
            if marker in variables:
                found.append(int(entry.name))
        return found

    def _start_once(self) -> None:
        directory = self.directory
        for sub in ("state", "spool"):
            shutil.rmtree(directory / sub, ignore_errors=True)
            (directory / sub).mkdir(parents=True)
        key = directory / "munge.key"
        key.unlink(missing_ok=True)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(os.urandom(1024))
        (directory / "plugstack.conf").write_text("")
        self.conf.write_text(self._config(*_free_ports(2)))
        # --force: munged refuses root and the permissions of /tmp without it
        self._spawn(
            "munged",
            "--foreground",
            "--force",
            f"--socket={self._munge_socket}",
            f"--key-file={key}",
            f"--pid-file={directory / 'munged.pid'}",
            f"--log-file={directory / 'munged.log'}",
            f"--seed-file={directory / 'munged.seed'}",
        )
        self._poll(lambda: self._munge_socket.exists(), "munged did not create its socket")
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-N", self.node, "-f", str(self.conf))
        self._poll(self._node_idle, f"node {self.node} did not become idle")

    def _config(self, controller_port: int, node_port: int) -> str:
        d = self.directory
        cpus = len(os.sched_getaffinity(0))
        return f"""\
ClusterName=ppetest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self._munge_socket},cred_expire={CRED_EXPIRE_S}
StateSaveLocation={d / "state"}
SlurmdSpoolDir={d / "spool"}
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d / "slurmd.pid"}
SlurmctldLogFile={d / "slurmctld.log"}
SlurmdLogFile={d / "slurmd.log"}
SlurmctldDebug=debug
SlurmdDebug=info
PlugStackConfig={d / "plugstack.conf"}
MailProg=/bin/true
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
JobRequeue=1
JobFileAppend=1
ReturnToService=2
KillWait=2
InactiveLimit=0
MinJobAge=300
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=100 State=UNKNOWN
PartitionName=main Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""

    def _spawn(self, name: str, *args: str) -> None:
        executable = _which(name)
        assert executable is not None  # checked by slurm_unavailable
        prctl = ctypes.CDLL(None).prctl

        def die_with_parent() -> None:  # in the child, before exec
            prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: the daemons end with this process

        with open(self.directory / f"{name}.stderr", "wb") as stderr:
            self._processes[name] = subprocess.Popen(
                [executable, *args],
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.directory,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def _poll(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            exited = {n: p.returncode for n, p in self._processes.items() if p.poll() is not None}
            if exited:
                message = f"Slurm cluster: {what}: exited {exited}\n{self.log_tails()}"
                raise SlurmError(message)
            if time.monotonic() > deadline:
                message = f"Slurm cluster: {what} in {self.start_timeout} s\n{self.log_tails()}"
                raise SlurmError(message)
            time.sleep(0.1)

    def _node_idle(self) -> bool:
        result = self.run("scontrol", "show", "node", "-o", self.node, check=False)
        return parse_fields(result.stdout).get("State", "").startswith("IDLE")

    def log_tails(self, lines: int = 25) -> str:
        """The last ``lines`` lines each daemon wrote (its stderr, which has its whole log)."""
        return "\n".join(
            f"--- {name} ({self.directory / name}.stderr):\n"
            f"{_tail(self.directory / f'{name}.stderr', lines)}"
            for name in DAEMONS
        )

    # -- clients and jobs

    def run(
        self, *command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """A client command (``scontrol``, ``squeue``...) against this cluster, output
        captured; with ``check``, a failure is a `SlurmError` showing its output."""
        result = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self.env,
        )
        if check and result.returncode != 0:
            message = (
                f"{' '.join(command)} exited {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}"
            )
            raise SlurmError(message)
        return result

    def sbatch(
        self,
        script: str | Path,
        *options: str,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
    ) -> int:
        """Submit a batch job and return its id.

        Args:
            script: The script's path (a `Path`), or its text (a `str` starting with ``#!``).
            options: sbatch's options, e.g. ``"--requeue"``, ``*warning_options(2)``.
            cwd: The job's working directory, where its output file ``slurm-<id>.out`` goes
                unless ``--output`` says otherwise.
            env: Variables added to `env` for sbatch, which passes them to the job.
        """
        if isinstance(script, Path):
            text, arguments = None, [str(script)]
        elif isinstance(script, str) and script.startswith("#!"):
            text, arguments = script, []
        else:
            message = (
                "sbatch takes the script's path as a pathlib.Path or its text as a str starting "
                f"with '#!', got {script!r}"
            )
            raise ValueError(message)
        command = ["sbatch", "--parsable", *options, *arguments]
        result = subprocess.run(
            command,
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=cwd,
            env={**self.env, **(env or {})},
        )
        if result.returncode != 0:
            message = f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}"
            raise SlurmError(message)
        return int(result.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """The fields of ``scontrol show job -o <id>``: ``JobState``, ``Restarts``,
        ``ExitCode`` (``"status:signal"``), ``BatchFlag``, ``StdOut``..., all strings."""
        return parse_fields(self.run("scontrol", "show", "job", "-o", str(job_id)).stdout)

    def output(self, job_id: int) -> Path:
        """The path of the job's output file (its ``StdOut``)."""
        return Path(self.job(job_id)["StdOut"])

    def wait(
        self,
        job_id: int,
        until: Callable[[dict[str, str]], bool] = finished,
        *,
        timeout: float = 120.0,
        interval: float = 0.2,
    ) -> dict[str, str]:
        """Poll the job until ``until(info)`` holds and return that ``info`` (`job`).

        Raises:
            SlurmError: ``timeout`` passed, or the job ended without ``until`` holding; the
                message shows the job, its output and the controller's log.
        """
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if until(info):
                return info
            if finished(info):
                message = f"job {job_id} ended without the state waited for\n"
                raise SlurmError(message + self.describe(job_id))
            if time.monotonic() > deadline:
                message = f"job {job_id} did not get to the state waited for in {timeout} s\n"
                raise SlurmError(message + self.describe(job_id))
            time.sleep(interval)

    def describe(self, job_id: int, lines: int = 30) -> str:
        """The job's fields and the tails of its output file and of the controller's log,
        for failure messages."""
        try:
            info = self.job(job_id)
        except SlurmError as error:
            return f"job {job_id}: {error}"
        output = _tail(Path(info.get("StdOut", "")), lines)
        fields = " ".join(f"{k}={v}" for k, v in info.items())
        return (
            f"job {job_id}: {fields}\n--- output ({info.get('StdOut')}):\n{output}\n"
            f"--- slurmctld:\n{_tail(self.directory / 'slurmctld.stderr', lines)}"
        )
