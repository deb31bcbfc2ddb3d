"""First contact with the hosts, before Terraform: pin each host's key, learn its home folder,
check its Python.

Host keys: the cluster keeps its own known_hosts (the workspace's ``known_hosts``, 0600). A key
the user's ``~/.ssh/known_hosts`` already holds for a host is the one accepted there; a host
neither knows is trusted on first use, its fingerprint printed, and recorded. From then on
every connection (Terraform's, whose ``host_key`` is the pinned key, and the transport's,
which reads the file) refuses another key, naming the host: nothing runs there.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
import tempfile
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from skyinfra.errors import HostKeyChangedError, SpecError, TransportError
from skyinfra.targets.ssh.spec import SshSpec, check_key_file
from skyinfra.topology import Accelerator
from skyinfra.transport.ssh import SshKeys, SshTarget, SshTransport

KNOWN_HOSTS = "known_hosts"
USER_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
MIN_PYTHON = (3, 10)
# Under the login user's home: .skyinfra/<cluster>/node-<index>.
NODES_FOLDER = ".skyinfra"


@dataclass(frozen=True)
class HostFacts:
    index: int
    host: str
    home: str
    python_version: str
    host_key: str  # "<type> <base64>", as Terraform's connection host_key takes it
    # nvidia-smi's list at first contact (None: no GPU, or no nvidia-smi on the host).
    accelerator: Accelerator | None = None

    @property
    def gpus(self) -> int:
        return self.accelerator.count if self.accelerator else 0

    def node_dir(self, cluster: str) -> str:
        return f"{self.home.rstrip('/')}/{NODES_FOLDER}/{cluster}/node-{self.index}"


def host_name(host: str, port: int) -> str:
    """How known_hosts names a host."""
    return host if port == 22 else f"[{host}]:{port}"


def seed_known_hosts(
    dest: Path, cluster_file: Path, section: SshSpec, hosts: tuple[str, ...]
) -> set[str]:
    """``dest``: the cluster's pinned keys, plus the user's own entries for ``hosts`` that
    the cluster has not pinned yet (theirs win for a host the cluster has never seen). The
    hosts of ``hosts`` whose key is known either way."""
    keys = paramiko.HostKeys()
    if cluster_file.is_file():
        keys.load(str(cluster_file))
    user_file = USER_KNOWN_HOSTS.expanduser()
    if user_file.is_file():
        theirs = paramiko.HostKeys()
        try:
            theirs.load(str(user_file))
        except (OSError, paramiko.SSHException, ValueError):
            theirs = paramiko.HostKeys()
        for host in hosts:
            name = host_name(host, section.port)
            found = theirs.lookup(name)
            if found and not keys.lookup(name):
                for key_type, key in found.items():
                    keys.add(name, key_type, key)
    keys.save(str(dest))
    return {h for h in hosts if keys.lookup(host_name(h, section.port))}


def write_known_hosts(path: Path, text: str) -> None:
    """The cluster's known_hosts, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


# One line of `nvidia-smi -L` (what the AWS node check counts): "GPU 0: NVIDIA H100 80GB HBM3
# (UUID: GPU-...)".
_GPU_LINE = re.compile(r"^GPU \d+: (?P<name>.*?)(?: \(UUID: [^)]*\))?$")


def gpus_from_listing(listing: str) -> Accelerator | None:
    """The host's GPUs from ``nvidia-smi -L``'s lines, counted as the AWS node check counts
    them (one "GPU N: ..." line each); None when there is none. The type is the name
    nvidia-smi gives (without its "NVIDIA " prefix); mixed models are listed together."""
    names = [
        m.group("name").strip().removeprefix("NVIDIA ")
        for m in (_GPU_LINE.match(line.strip()) for line in listing.splitlines())
        if m
    ]
    if not names:
        return None
    return Accelerator(type=" / ".join(sorted(set(names))), count=len(names))


def python_found(version: str) -> str | None:
    """What the probe's version line says of ssh.python when it is not a usable interpreter
    ("none on PATH", "Python 3.8", or the unexpected line itself); None: Python 3.10 or newer."""
    if version == "none":
        return "none on PATH"
    parsed = re.fullmatch(r"(\d+)\.(\d+)", version.strip())
    if parsed is None:  # a wrapper or a shell's banner in its place: say what came back
        return f"no Python version but {version.strip()[:80]!r}"
    found = (int(parsed[1]), int(parsed[2]))
    return None if found >= MIN_PYTHON else f"Python {found[0]}.{found[1]}"


def _probe_script(python: str) -> str:
    """Prints the home folder, the Python version (or "none"), then nvidia-smi's GPU list
    when the host has nvidia-smi."""
    py = shlex.quote(python)
    return (
        'printf "%s\\n" "$HOME"; '
        f"if command -v {py} >/dev/null 2>&1; then "
        f"{py} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'; "
        "else echo none; fi; "
        "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>&1 || true; fi"
    )


@dataclass(frozen=True)
class Contacted:
    """What first contact found: the reached hosts' facts (node order), the known_hosts text
    to keep, the hosts of ``lost_ok`` that did not answer (node index -> why), and those of
    ``unfit_ok`` that answered but fail the enrolment check (node index -> why)."""

    facts: list[HostFacts]
    known_hosts: str
    unreachable: dict[int, str]
    unfit: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Unfit:
    """A spare that answered but cannot be enrolled (its Python, its login shell)."""

    why: str


def contact(
    section: SshSpec,
    hosts: tuple[str, ...],
    cluster_known_hosts: Path,
    *,
    echo: Callable[[str], None],
    timeout_s: float = 20.0,
    lost_ok: Collection[int] = (),
    unfit_ok: Collection[int] = (),
    labels: Mapping[int, str] | None = None,
) -> Contacted:
    """Every host's facts (``hosts[i]`` is node i's host) and the known_hosts text to keep;
    all hosts at once. HostKeyChangedError naming the host when a key differs from the pinned
    one; TransportError naming the host when it cannot be reached (but for a node of
    ``lost_ok``, an enrolled host: it is listed as unreachable) or refuses the key (but for
    one of ``unfit_ok``, a spare: listed too); SpecError (ssh.python) naming the host when
    its Python is missing or older than 3.10 (but for one of ``unfit_ok``: listed in
    ``unfit``, as a host whose shell gives no home; a spare that fails its check is passed
    over, not a stop). A changed host key stops everything, spare or not. ``labels``: how a
    message names where a node's host is listed (default ``ssh.hosts[i]``)."""
    key = check_key_file(section)
    with tempfile.TemporaryDirectory(prefix="skyinfra-ssh-") as tmp:
        known = Path(tmp) / KNOWN_HOSTS
        seeded = seed_known_hosts(known, cluster_known_hosts, section, hosts)
        transport = SshTransport(
            {
                i: SshTarget(host=h, user=section.user, port=section.port)
                for i, h in enumerate(hosts)
            },
            keys=SshKeys(key_path=key, known_hosts=known),
            connect_timeout_s=timeout_s,
        )

        def where(host: str) -> str:
            name = host_name(host, section.port)
            if cluster_known_hosts.is_file() and paramiko.HostKeys(str(cluster_known_hosts)).lookup(
                name
            ):
                return f"pinned in {cluster_known_hosts}"
            return f"your {USER_KNOWN_HOSTS} holds for it"

        def label(index: int) -> str:
            return (labels or {}).get(index, f"ssh.hosts[{index}]")

        def one(index: int) -> HostFacts | str | _Unfit:
            host = hosts[index]
            try:
                out = transport.check_call(index, _probe_script(section.python), timeout=timeout_s)
            except HostKeyChangedError as err:
                raise HostKeyChangedError(
                    f"host {host} ({label(index)}) presented another host key than the one "
                    f"{where(host)}: refusing it, nothing was run on any host. If the machine "
                    "was reinstalled, remove its line from that file and run `skyinfra up` "
                    f"again ({err})"
                ) from err
            except TransportError as err:
                refused = isinstance(err.__cause__, paramiko.AuthenticationException)
                if refused and index in unfit_ok:
                    return f"it refused key {section.key} for user {section.user}"
                if refused:
                    raise SpecError(
                        "ssh.key", section.key,
                        f"a key that host {host} ({label(index)}) accepts for user "
                        f"{section.user}: it refused this one; add its public half to that "
                        "user's ~/.ssh/authorized_keys there, or set ssh.key/ssh.user",
                    ) from err  # fmt: skip
                if index in lost_ok:
                    return str(err)
                raise TransportError(
                    f"host {host} ({label(index)}): cannot log in as {section.user} on port "
                    f"{section.port} with key {section.key}; check that the host is up, that "
                    "the key's public half is in the user's ~/.ssh/authorized_keys, and "
                    f"ssh.user/ssh.port ({err})"
                ) from err
            lines = out.strip().splitlines()
            home, version = [*lines, "", ""][:2] if len(lines) >= 2 else ("", "none")
            if not home.startswith("/"):
                if index in unfit_ok:
                    return _Unfit(f"its login shell gave no home folder ({out.strip()[:80]!r})")
                raise TransportError(f"host {host}: its login shell gave no home folder ({out!r})")
            found = python_found(version)
            if found is not None:
                if index in unfit_ok:
                    return _Unfit(
                        f"ssh.python {section.python!r} is {found} there, not Python 3.10 or newer"
                    )
                raise SpecError(
                    "ssh.python", section.python,
                    f"an interpreter of Python 3.10 or newer on host {host} ({found} there); "
                    "install one or set ssh.python to its path",
                )  # fmt: skip
            client = transport.ssh_client(index).get_transport()
            assert client is not None
            server_key = client.get_remote_server_key()
            return HostFacts(
                index, host, home, version, f"{server_key.get_name()} {server_key.get_base64()}",
                accelerator=gpus_from_listing("\n".join(lines[2:])),
            )  # fmt: skip

        try:
            with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
                found = list(pool.map(one, range(len(hosts))))
        finally:
            transport.close()
        text = known.read_text() if known.is_file() else ""
    facts = [f for f in found if isinstance(f, HostFacts)]
    for f in facts:
        if f.host not in seeded:
            echo(
                f"[skyinfra] host {f.host}: host key {key_fingerprint(f.host_key)} trusted on "
                f"first use; pinned in {cluster_known_hosts} (every later connection is held "
                "to it)"
            )
    unreachable = {i: f for i, f in enumerate(found) if isinstance(f, str)}
    unfit = {i: f.why for i, f in enumerate(found) if isinstance(f, _Unfit)}
    return Contacted(facts, text, unreachable, unfit)


def key_fingerprint(line: str) -> str:
    """OpenSSH's SHA256 fingerprint of a "<type> <base64>" key, as `ssh-keygen -l` prints it."""
    key_type, _, data = line.partition(" ")
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(data)).digest()).decode()
    return f"{key_type} SHA256:{digest.rstrip('=')}"
