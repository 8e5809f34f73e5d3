"""The Docker engine side of the sandbox: connecting, the hardened container, labels, leftovers.

Kept apart from `docker.py` so the sandbox class reads as policy (timeouts,
sessions, when things die) and this module as mechanism. Everything here
blocks; the sandbox calls it through `asyncio.to_thread`. The docker SDK is
imported inside functions only: `import agentfsm` never loads it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal

from ..errors import NoSuchFileError, SandboxError
from ..log import event
from .base import CODE_GROUP, EXEC_TAG, KILL_TAGGED, WORKER_SOURCE, new_tag
from .docker_stream import (
    CONTAINER_WORKER,
    RUN,
    WORKER_CAPABILITIES,
    WORKER_USER,
    ExecStream,
    tar_file,
    untar_file,
)
from .settings import DEFAULT_IMAGE, SandboxSettings

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

__all__ = [
    "INTERNAL_TIMEOUT_S",
    "LABEL",
    "Engine",
    "connect",
    "image_id",
    "image_missing",
    "owner_labels",
    "owner_verdict",
    "remove_leftovers",
    "sweep_leftovers",
    "unavailable",
]

LABEL = "agentfsm.sandbox"
"""Every container and volume the sandbox makes carries this label (value ``1``)."""
INTERNAL_TIMEOUT_S = 30.0
"""Bound on the sandbox's own short commands (path checks, the killer, the OOM counter)."""
_KILL_PATIENCE_S = 10.0
"""How long the killers may be refused a process before the container is restarted instead."""
_OOM_COUNTER = re.compile(rb"^oom_kill (\d+)$", re.M)
_OOM_FILES = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"

_SWEPT = False
_SWEEP_LOCK = threading.Lock()
_SWEEPER: threading.Thread | None = None
"""The thread of this process's one sweep of leftovers, once started."""

_KNOWN_LOCK = threading.Lock()
_API_VERSIONS: dict[str, str] = {}
"""Engine (DOCKER_HOST) -> the API version it negotiated: a new client then skips asking again."""
_IMAGE_IDS: dict[tuple[str, str], str] = {}
"""(engine, image name) -> the image's id, once seen on that engine."""
_WRITABLE: set[tuple[str, str, str, str]] = set()
"""(engine, image id, workspace, users) whose fresh volume the users can already write to.

Process-wide, like the sweep: they are facts about an engine and its images,
true for every sandbox this process starts there, learned by the first one.
A cached image removed since is found missing at the container's creation.
"""


def _engine_key() -> str:
    return os.environ.get("DOCKER_HOST", "")


def connect(timeout: float = 60.0) -> DockerClient:
    """A client that has answered a ping, or `SandboxError` saying where it looked and what to do."""
    try:
        import docker
    except ImportError:
        raise SandboxError(
            "the Docker sandbox needs the docker SDK: pip install 'agentfsm[docker]' "
            "(or set [sandbox] mode = 'local')"
        ) from None
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock (DOCKER_HOST is not set)"
    key = _engine_key()
    try:
        client = docker.from_env(timeout=int(timeout), version=_API_VERSIONS.get(key))
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"cannot reach the Docker engine at {where}: {exc}. Start it (dockerd, or Docker Desktop), "
            "point DOCKER_HOST at it, or set [sandbox] mode = 'local'"
        ) from None
    with _KNOWN_LOCK:
        _API_VERSIONS[key] = client.api.api_version
    return client


def image_id(client: DockerClient, image: str) -> str:
    """The image's id on this engine, asked once per process; `SandboxError` naming the fix if missing."""
    import docker

    key = (_engine_key(), image)
    known = _IMAGE_IDS.get(key)
    if known is not None:
        return known
    try:
        found = client.images.get(image).id or image
    except docker.errors.ImageNotFound:
        raise SandboxError(image_missing(image)) from None
    with _KNOWN_LOCK:
        _IMAGE_IDS[key] = found
    return str(found)


def _forget_image(image: str) -> None:
    with _KNOWN_LOCK:
        _IMAGE_IDS.pop((_engine_key(), image), None)


def image_missing(image: str) -> str:
    if image == DEFAULT_IMAGE:
        return (
            f"the sandbox image {image!r} is not on this Docker engine: build it (no registry needed) "
            "with `agentfsm sandbox build`"
        )
    return (
        f"the sandbox image {image!r} is not on this Docker engine: run `docker pull {image}` where a "
        "registry is reachable, or build a local image without one with `agentfsm sandbox build` "
        f"and set [sandbox] image = {DEFAULT_IMAGE!r}"
    )


_OWNER = "agentfsm.owner_"
_REMOVE_HINT = (
    "they are kept because their owner may still run; once it has ended, remove them with "
    "`docker rm -f NAME` and `docker volume rm NAME`"
)


def owner_labels(session: str) -> dict[str, str]:
    """Labels naming this process, so a later process can tell our leftovers from live sandboxes.

    A pid alone names a process only within one pid namespace of one boot:
    two processes in different containers sharing the hostname (one run with
    the host's network, say) can hold the same pid. So the owner is the
    host, the boot id, the pid namespace, the pid and the pid's start time.
    """
    pid = os.getpid()
    return {
        LABEL: "1",
        "agentfsm.session": session,
        _OWNER + "host": socket.gethostname(),
        _OWNER + "boot": _boot_id() or "",
        _OWNER + "pidns": _pid_namespace() or "",
        _OWNER + "pid": str(pid),
        _OWNER + "started": _process_started(pid) or "",
    }


def _boot_id() -> str | None:
    """This boot of the kernel (Linux): the same in every container on it, new after a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    """This process's pid namespace, as ``pid:[inode]``, if /proc shows the pids of that namespace.

    A /proc mounted from another namespace would show other processes under
    our pids: then no pid can be judged, and the answer is None.
    """
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _process_started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is not mistaken."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


Verdict = tuple[Literal["dead", "alive", "unknown"], str]
"""What the sweep concludes about a sandbox's owner, and why (for the log)."""


def owner_verdict(labels: dict[str, str]) -> Verdict:
    """Whether the owner of a sandbox is provably dead, provably alive, or unknown (then it is kept).

    Provably dead means: this host, this boot, this pid namespace, and the
    pid is free or now another process (its start time differs). Anything
    else (another host, boot or namespace, labels of an older version
    without them, a /proc that cannot be judged) is unknown, and unknown keeps
    the sandbox: removing a live one breaks a run, keeping a dead one costs disk.
    """
    host = labels.get(_OWNER + "host")
    if host != socket.gethostname():
        return "unknown", f"owned on host {host!r}"
    boot, namespace = _boot_id(), _pid_namespace()
    if boot is None or namespace is None:
        return "unknown", "this process cannot read its boot id or pid namespace from /proc"
    if labels.get(_OWNER + "boot") != boot:
        return "unknown", f"owned in boot {labels.get(_OWNER + 'boot')!r}, not this one ({boot!r})"
    if labels.get(_OWNER + "pidns") != namespace:
        return "unknown", f"owned in pid namespace {labels.get(_OWNER + 'pidns')!r}, not ours ({namespace!r})"
    try:
        pid = int(labels.get(_OWNER + "pid", ""))
    except ValueError:
        return "unknown", f"owner pid {labels.get(_OWNER + 'pid')!r} is not a number"
    started = _process_started(pid)
    if started is None:
        if os.path.exists(f"/proc/{pid}"):
            return "unknown", f"the start time of pid {pid} cannot be read"
        return "dead", f"pid {pid} has ended"
    if started != labels.get(_OWNER + "started"):
        return "dead", f"pid {pid} is now another process (started at tick {started})"
    return "alive", f"pid {pid} runs"


def sweep_leftovers() -> None:
    """Once per process, in a thread of its own (off the start's critical path): `remove_leftovers`."""
    global _SWEPT, _SWEEPER
    with _SWEEP_LOCK:
        if _SWEPT:
            return
        _SWEPT = True
        _SWEEPER = threading.Thread(target=_sweep, name="agentfsm-sandbox-sweep", daemon=True)
    _SWEEPER.start()


def _sweep() -> None:
    try:
        client = connect()
    except SandboxError as exc:
        event("sandbox_sweep_failed", level=logging.WARNING, error=str(exc))
        return
    try:
        remove_leftovers(client)
    except Exception as exc:  # the sweep is housekeeping: a failure is logged, never a sandbox's error
        event("sandbox_sweep_failed", level=logging.WARNING, error=str(exc))
    finally:
        client.close()


def remove_leftovers(client: DockerClient) -> None:
    """Remove containers and volumes whose owners are provably dead.

    The others stay; those whose owner cannot be judged from here (another
    host, boot or pid namespace) are logged with how to remove them by hand:
    a live owner's sandbox is never touched.
    """
    import docker

    removed: list[str] = []
    kept: list[str] = []
    # ignore_removed: a container another process removes while the list is read is skipped, not an error
    found: list[tuple[str, dict[str, str], Callable[[], object]]] = []
    for c in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        found.append((c.name or c.id or "?", c.labels, functools.partial(c.remove, force=True, v=True)))
    for v in client.volumes.list(filters={"label": LABEL}):
        found.append((v.name or "?", v.attrs.get("Labels") or {}, functools.partial(v.remove, force=True)))
    for name, labels, remove in found:
        verdict, why = owner_verdict(labels)
        if verdict == "unknown":
            kept.append(f"{name} ({why})")
        elif verdict == "dead":
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                remove()
                removed.append(f"{name} ({why})")
    if removed:
        event("sandbox_leftovers_removed", removed=removed)
    if kept:
        event("sandbox_leftovers_kept", kept=kept, hint=_REMOVE_HINT)


class Engine:
    """One sandbox's container and volume, and the blocking calls on them.

    `create` makes both (and removes what it made if a step fails);
    `destroy` removes both and never raises on what is already gone.
    A start costs the engine three calls (create, attach, start) once this
    process knows the engine and the image: no exec, no volume call of its
    own, no image check; the sweep runs beside it. The container's own
    command is the Python worker (`CONTAINER_WORKER`), on the stream
    attached before the start (so nothing it writes is lost), which the
    sandbox takes for its first ``python_execute`` (`take_worker`).
    """

    def __init__(self, client: DockerClient, settings: SandboxSettings, session: str) -> None:
        self.client = client
        self.settings = settings
        self.session = session
        self.name = f"agentfsm-sandbox-{session}"
        self.container: Container | None = None
        self.made_volume = False
        self.worker_tag = new_tag() + "."
        """The tag prefix of the container's own worker and its calls (the worker is PREFIX.worker)."""
        self.worker_ended = f"__AGENTFSM_WORKER_ENDED_{new_tag()}__"
        """The line the container's command prints once its worker has ended."""
        self._worker: ExecStream | None = None

    @classmethod
    def create(cls, settings: SandboxSettings, session: str) -> Engine:
        import docker

        client = connect()
        sweep_leftovers()
        engine = cls(client, settings, session)
        try:
            image = image_id(client, settings.image)
            engine._run()
            engine._own_workspace(image)
        except docker.errors.DockerException as exc:
            engine.destroy()
            raise SandboxError(f"cannot set up the sandbox {engine.name} on the engine: {exc}") from None
        except BaseException:
            engine.destroy()
            raise
        return engine

    def _run(self) -> None:
        """Create the container (its labelled workspace volume made with it), attach to it, start it."""
        import docker
        from docker.types import LogConfig, Mount

        s, labels, api = self.settings, owner_labels(self.session), self.client.api
        host = api.create_host_config(
            init=True,  # reaps orphans, so killed commands leave no zombies
            network_mode="bridge" if s.network else "none",
            mem_limit=s.memory,
            memswap_limit=s.memory,  # swap = memory: no swap on top of the limit
            nano_cpus=int(s.cpus * 1e9),
            pids_limit=s.pids_limit,
            cap_drop=["ALL"],
            cap_add=WORKER_CAPABILITIES,  # effective only in the root workers: the user's processes get none
            security_opt=["no-new-privileges"],
            read_only=True,
            mounts=[Mount(s.workspace, self.name, type="volume", labels=labels)],
            tmpfs={"/tmp": f"size={s.tmp_size},mode=1777"},
            log_config=LogConfig(type="none"),  # the worker's output is the calls': the engine keeps none
        )
        try:
            self.made_volume = True  # from here on, destroy removes it by name
            made = api.create_container(
                s.image,
                entrypoint=["sh", "-c", CONTAINER_WORKER],
                command=[self.worker_tag + "worker", self.worker_ended, WORKER_SOURCE, s.user],
                name=self.name,
                # attached, as `docker run -i`: stdin open until the attached stream closes (StdinOnce),
                # then the worker reads the end of its input and ends
                detach=False,
                stdin_open=True,
                labels=labels,
                user=WORKER_USER,  # the container's own worker; every other exec runs as `s.user`
                working_dir=s.workspace,
                environment={"HOME": s.workspace, "LANG": "C.UTF-8"},
                host_config=host,
            )
            self.container = self.client.containers.prepare_model({"Id": made["Id"]})
            params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            self._worker = ExecStream(api.attach_socket(made["Id"], params=params))
            api.start(made["Id"])
        except docker.errors.ImageNotFound:
            _forget_image(s.image)  # removed since this process last saw it
            raise SandboxError(image_missing(s.image)) from None
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"cannot start a sandbox container from {s.image!r}: {exc.explanation or exc} "
                "(check [sandbox]: network = true needs a bridge network; the limits need cgroups)"
            ) from None

    def _own_workspace(self, image: str) -> None:
        """Make the workspace writable by the sandbox user and by the shell's, its group.

        A new volume takes the owner and mode of the image's directory, so
        images that ship the workspace so (ours does: nobody's, mode 2775) need
        nothing, and once one sandbox has seen it so, the others of this
        process need not check. Otherwise a one-off root container holding only
        CAP_CHOWN and CAP_FOWNER hands the volume to the user and opens it to
        the group.
        """
        s = self.settings
        key = (_engine_key(), image, s.workspace, f"{s.user} {s.shell_identity}")
        if key in _WRITABLE:
            return
        if self._writable():
            with _KNOWN_LOCK:
                _WRITABLE.add(key)
            return
        self.client.containers.run(
            s.image,
            entrypoint=["sh", "-c", 'chown "$0" "$1" && chmod 2775 "$1"'],
            command=[s.user, s.workspace],
            user="0:0",
            remove=True,
            labels=owner_labels(self.session),
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=["CHOWN", "FOWNER"],
            security_opt=["no-new-privileges"],
            volumes={self.name: {"bind": s.workspace, "mode": "rw"}},
        )
        if not self._writable():
            raise SandboxError(
                f"the workspace {s.workspace} is not writable by user {s.user} and shell_user "
                f"{s.shell_identity}: give shell_user the group of user (its default does)"
            )

    def _writable(self) -> bool:
        """Whether the snippets' user and the shell's can both write to the workspace."""
        s, probe = self.settings, ["test", "-w", self.settings.workspace]
        return all(self.simple(probe, user=user)[0] == 0 for user in (s.user, s.shell_identity))

    def take_worker(self) -> ExecStream | None:
        """The attached stream of the container's own worker, once (then None: later workers are exec'd)."""
        worker, self._worker = self._worker, None
        return worker

    def destroy(self) -> None:
        import docker

        worker = self.take_worker()
        if worker is not None:
            worker.close()
        container, volume, self.container, self.made_volume = self.container, self.made_volume, None, False
        api = self.client.api
        for remove in (
            (lambda: container.remove(force=True, v=True)) if container is not None else None,
            (lambda: api.remove_volume(self.name, force=True)) if volume else None,
        ):
            if remove is None:
                continue
            try:
                remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException as exc:
                event("sandbox_remove_failed", level=logging.WARNING, session=self.session, error=str(exc))
        self.client.close()
        if container is not None:
            event("sandbox_destroyed", kind="docker", session=self.session)

    @contextlib.contextmanager
    def errors(self) -> Iterator[str]:
        """The container id; engine errors become `SandboxError`s saying the container failed or is gone."""
        import docker

        if self.container is None or self.container.id is None:
            raise SandboxError("the sandbox container is gone (closed, or never started)")
        try:
            yield self.container.id
        except docker.errors.DockerException as exc:
            raise SandboxError(f"the sandbox container {self.name} failed or is gone: {exc}") from None

    def open_exec(
        self, argv: list[str], tag: str, *, stdin: bool, user: str | None = None
    ) -> tuple[str, ExecStream]:
        """Start `argv` with its tag in the environment, as `user` (None: the sandbox's user); the exec id
        and its stream."""
        with self.errors() as cid:
            api = self.client.api
            exec_id: str = api.exec_create(
                cid,
                argv,
                stdin=stdin,
                environment={EXEC_TAG: tag},
                workdir=self.settings.workspace,
                user=user or self.settings.user,
            )["Id"]
            return exec_id, ExecStream(api.exec_start(exec_id, socket=True))

    def exit_code(self, exec_id: str) -> int | None:
        with self.errors():
            code: int | None = self.client.api.exec_inspect(exec_id).get("ExitCode")
        return code

    def simple(
        self, argv: list[str], *, wrap: bool = True, user: str | None = None
    ) -> tuple[int | None, bytes, bytes]:
        """A short internal command (no tag, no streaming), bounded by the in-container timeout, as `user`
        (None: the sandbox's user).

        `wrap=False` runs `argv` as the exec's only process, without the timeout wrapper's two.
        """
        if wrap:
            argv = ["sh", "-c", RUN, str(INTERNAL_TIMEOUT_S), *argv]
        with self.errors() as cid:
            api = self.client.api
            exec_id = api.exec_create(cid, argv, user=user or self.settings.user)["Id"]
            stdout, stderr = api.exec_start(exec_id, demux=True)
        return self.exit_code(exec_id), stdout or b"", stderr or b""

    def kill(self, tag: str, group: int | None = None, *, snippets: bool = False) -> None:
        """Kill process group `group` (if known), then every process carrying `tag`, and with `snippets`
        every process of the Python worker's snippets (`CODE_GROUP`: the worker's own kill, when the worker
        itself has to be killed).

        Each killer is its exec's only process and never forks: under a fork
        bomb the pids limit leaves no room for more, and the bomb's spinning
        processes leave little CPU, so the group kill is a shell builtin
        (instant) and the tag scan, which finds children that left the group,
        comes second. Both are retried while the pids limit refuses them a
        process; if they never get one, the container is restarted (the
        workspace volume survives; every process in it dies).
        """
        steps = [["python3", "-I", "-S", "-c", KILL_TAGGED, tag, *([str(CODE_GROUP)] if snippets else [])]]
        if group is not None:
            steps.insert(0, ["sh", "-c", f"kill -s KILL -- -{group} 2>/dev/null; true"])
        deadline = time.monotonic() + _KILL_PATIENCE_S
        for argv in steps:
            while not self._try(argv):
                if time.monotonic() > deadline:
                    with self.errors():
                        event("sandbox_restarted", level=logging.WARNING, session=self.session)
                        assert self.container is not None
                        self.container.restart(timeout=0)
                    return
                time.sleep(0.1)

    def _try(self, argv: list[str]) -> bool:
        with contextlib.suppress(SandboxError):  # as the workers' user: they are among the processes killed
            return self.simple(argv, wrap=False, user=WORKER_USER)[0] == 0
        return False

    def oom_count(self) -> int:
        """How many processes the memory limit has killed in this container so far (cgroup v1 or v2)."""
        _, stdout, _ = self.simple(["sh", "-c", _OOM_FILES])
        return max((int(n) for n in _OOM_COUNTER.findall(stdout)), default=0)

    def get(self, path: str, real: str) -> bytes:
        import docker

        with self.errors():
            assert self.container is not None
            try:
                chunks, _ = self.container.get_archive(real)
                archive = b"".join(chunks)
            except docker.errors.NotFound:
                raise NoSuchFileError(f"{path!r}: no such file in the sandbox workspace") from None
        return untar_file(archive, path)

    def put(self, real: str, data: bytes) -> None:
        archive = tar_file(real, data, self.settings.user)
        with self.errors():
            assert self.container is not None
            self.container.put_archive(real.rsplit("/", 1)[0] or "/", archive)


def unavailable(image: str) -> str | None:
    """Why the Docker sandbox cannot run here (no SDK, no engine, no image), or None if it can."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'agentfsm[docker]')"
    try:
        client = connect(timeout=10)
    except SandboxError as exc:
        return str(exc)
    try:
        image_id(client, image)
    except SandboxError as exc:
        return str(exc)
    except docker.errors.DockerException as exc:
        return f"the Docker engine failed to answer about {image!r}: {exc}"
    finally:
        client.close()
    return None
