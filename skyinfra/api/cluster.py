"""``skyinfra.Cluster``: a cluster from Python (a script, a notebook), driven through the same
code the CLI commands call: the spec's checks (skyinfra.spec, skyinfra.validation),
skyinfra.lifecycle's up/down/status, and the run session (skyinfra.run.session) with its jobs.

Only this module's own names and the standard library are imported with ``import skyinfra``;
the library behind it is imported when a method runs.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyinfra.api.calls import Call
    from skyinfra.api.jobs import Job
    from skyinfra.run.report import RunReport
    from skyinfra.spec import ClusterSpec
    from skyinfra.terraform import EngineFactory
    from skyinfra.topology import Topology
    from skyinfra.transport.base import NodeTransport
    from skyinfra.workspace import Workspace

Echo = Callable[[str], None]


def _print(line: str) -> None:
    # sys.stdout as it is now (a notebook swaps it per cell).
    print(line, file=sys.stdout, flush=True)


@dataclass(frozen=True)
class _Choices:
    """The keyword arguments of ``Cluster(...)`` and ``Cluster.from_spec`` that are not the
    spec's fields (the class says what each does)."""

    keep: bool
    yes: bool
    adopt: bool
    all_logs: bool
    echo: Echo | None
    target_options: Mapping[str, Any]


class Cluster:
    """A cluster named by a spec: ``Cluster(name="try", provider="local", nodes=2,
    plugins=["jax", "keras:backend=jax"])`` takes the spec file's fields as keyword arguments
    (``local={...}``, ``aws={...}`` for a target's table) and checks them as ``skyinfra
    validate`` does: a bad one raises :class:`skyinfra.SpecError` naming the field, and nothing
    is written. ``Cluster.from_spec("skyinfra.toml")`` reads a spec file.

    ``dir``: the clusters folder (as ``--dir``; default ``$SKYINFRA_DIR``, else
    ``.skyinfra/clusters``). ``yes``: what the CLI confirms on a terminal (``down``, an ``up``
    that destroys or replaces nodes) goes ahead; without it those raise
    :class:`skyinfra.ConfirmationRequired` and change nothing. ``keep``: leaving a ``with``
    block keeps the cluster up. ``all_logs``: ``run`` streams every node, not only node 0.
    ``echo``: where progress lines go (default: printed to stdout).
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        dir: str | Path | None = None,
        keep: bool = False,
        yes: bool = False,
        adopt: bool = False,
        all_logs: bool = False,
        echo: Echo | None = None,
        target_options: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        from skyinfra.spec import load_spec_keeping_applied
        from skyinfra.workspace import applied_spec

        raw = {key: value for key, value in fields.items() if value is not None}
        if name is not None:
            raw["name"] = name
        # An existing cluster keeps what was applied where these arguments say nothing (as a
        # bare `skyinfra up --name N`): Cluster(name=N) must not shrink it to the defaults.
        spec, kept = load_spec_keeping_applied(
            None,
            raw,
            default_path=None,
            applied=functools.partial(applied_spec, dir),
            flags=_arguments(),
            overrides_are_flags=False,
        )
        self._init(
            spec, None, dir, _Choices(keep, yes, adopt, all_logs, echo, target_options or {})
        )
        for value in kept:
            self._echo(value.line("Cluster.from_spec's file"))

    @classmethod
    def from_spec(
        cls,
        path: str | Path,
        *,
        dir: str | Path | None = None,
        keep: bool = False,
        yes: bool = False,
        adopt: bool = False,
        all_logs: bool = False,
        echo: Echo | None = None,
        target_options: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> Cluster:
        """The cluster of a spec file; ``overrides`` replace its fields (as the CLI's flags)."""
        from skyinfra.spec import load_spec_keeping_applied
        from skyinfra.workspace import applied_spec

        spec_file = Path(path).absolute()  # `up` records it: where the cluster came from
        spec, kept = load_spec_keeping_applied(
            spec_file,
            overrides,
            default_path=None,
            applied=functools.partial(applied_spec, dir),
            flags=_arguments(),
            overrides_are_flags=False,
        )
        self = cls.__new__(cls)
        self._init(
            spec, spec_file, dir, _Choices(keep, yes, adopt, all_logs, echo, target_options or {})
        )
        for value in kept:
            self._echo(value.line(str(spec_file)))
        return self

    def _init(
        self,
        spec: ClusterSpec,
        spec_file: Path | None,
        clusters_root: str | Path | None,
        choices: _Choices,
    ) -> None:
        from skyinfra.lifecycle import check_target_options
        from skyinfra.validation import require_valid
        from skyinfra.workspace import Workspace, clusters_dir

        require_valid(spec)  # `skyinfra validate`'s offline checks, before anything
        options = {k: v for k, v in choices.target_options.items() if v}
        check_target_options(spec, options)
        self.spec = spec
        self.name = spec.name
        self._spec_file = spec_file
        self._ws = Workspace(clusters_dir(clusters_root) / spec.name)
        self.keep = choices.keep
        self.yes = choices.yes
        self._adopt = choices.adopt
        self.all_logs = choices.all_logs
        self._echo = choices.echo or _print
        self._options = options

    def __repr__(self) -> str:
        return (
            f"Cluster(name={self.name!r}, provider={self.spec.provider!r}, nodes={self.spec.nodes})"
        )

    # ------------------------------------------------------------------ life cycle

    @property
    def workspace(self) -> Path:
        return self._ws.path

    def _engine(self, spec: ClusterSpec) -> EngineFactory:
        from skyinfra.terraform.external import engine_factory

        return engine_factory(None, spec.engine, spec.provider)

    def _confirm(self, yes: bool | None) -> Callable[[Sequence[Any]], bool]:
        answer = self.yes if yes is None else yes
        return lambda changes: answer

    def up(self, *, yes: bool | None = None) -> Topology:
        """Create or update the cluster as `skyinfra up` does; returns its topology."""
        from skyinfra import lifecycle

        spec = self.spec  # with what an existing cluster keeps (its engine too): __init__
        _, topology = lifecycle.up(
            spec,
            self._ws,
            self._echo,
            options=self._options,
            origin=lifecycle.SpecOrigin(self._spec_file, adopt=self._adopt),
            confirm=self._confirm(yes),
            engine_factory=self._engine(spec),
        )
        self._echo(
            f"[skyinfra] cluster {spec.name!r} is up: {len(topology.nodes)} node(s), "
            f"head {topology.head_addr}:{topology.head_port}"
        )
        return topology

    def down(self, *, yes: bool | None = None) -> None:
        """Destroy the cluster as `skyinfra down` does (needs ``yes``)."""
        from skyinfra import lifecycle

        ws = self._existing()
        lifecycle.down(
            ws, self._echo, confirm=self._confirm(yes), engine_factory=self._engine(ws.spec())
        )
        self._echo(f"[skyinfra] cluster {ws.name!r} is down; state kept in {ws.path}")

    def status(self) -> dict[str, Any]:
        """What `skyinfra status --json` prints."""
        from skyinfra import lifecycle

        ws = self._existing()
        return lifecycle.status(ws, engine_factory=self._engine(ws.spec()))

    @property
    def topology(self) -> Topology:
        """The cluster's topology.json; ClusterDownError when it is down."""
        from skyinfra.errors import ClusterDownError
        from skyinfra.topology import read_topology

        ws = self._existing()
        if not ws.topology_file.is_file():
            raise ClusterDownError(ws.name)
        return read_topology(ws.topology_file)

    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.keep:
            self._echo(f"[skyinfra] cluster {self.name!r} kept up (keep=True)")
            return
        self.down(yes=True)  # leaving the block is the yes: it brought the cluster up

    def _existing(self) -> Workspace:
        from skyinfra.errors import NoSuchClusterError

        if not self._ws.exists():
            raise NoSuchClusterError(
                f"no cluster named {self.name!r} in {self._ws.path.parent}; bring it up "
                "with Cluster.up() (or `skyinfra up`)"
            )
        return self._ws

    # ------------------------------------------------------------------ running code

    def run(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        nodes: Sequence[int] | int | None = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker of every node (``nodes``: of those nodes,
        numbered from 0 in the call, once they are free; an integer K: K of them, any free
        ones), with the plugins set up around it as `skyinfra run` does; the values it
        returned, one per worker in rank order. Either way the call is a job in the head's
        queue, at ``priority`` (as `run --priority N`). A failure raises
        :class:`skyinfra.RemoteError` with every node's outcome and the first failing
        worker's traceback text."""
        from skyinfra.api.calls import fetch_results

        with tempfile.TemporaryDirectory(prefix="skyinfra-call-") as tmp:
            transport, report, call = self._start(
                fn, args, kwargs, _Place(nodes, priority), Path(tmp), detach=False
            )
        try:
            self._raise_for(transport, report, call)
            return fetch_results(transport, report)
        finally:
            transport.close()  # an SSH target's connections: a notebook lives long

    def submit(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        nodes: Sequence[int] | int | None = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> Job:
        """Start ``fn(*args, **kwargs)`` as a detached job (as `skyinfra run --detach`) and
        return its handle (:class:`skyinfra.api.jobs.Job`: ``logs``, ``wait``, ``cancel``,
        ``result``) once every node of it has started, or once the head queued it (it says
        which, as `run --detach` does: its place and what it waits for, or its nodes)."""
        from skyinfra.api.jobs import Job
        from skyinfra.run.report import submitted_words

        with tempfile.TemporaryDirectory(prefix="skyinfra-call-") as tmp:
            transport, report, call = self._start(
                fn, args, kwargs, _Place(nodes, priority), Path(tmp), detach=True
            )
        transport.close()  # the job's handle connects again when it needs to
        # Queued (its position, what it waits for) or started, and where: as `run --detach`.
        self._echo(f"[skyinfra] {submitted_words(report, call.name)}")
        return Job(
            self._ws,
            transport,
            report.run_id,
            report.run_dir,
            call.name,
            self._echo,
        )

    def recover(self, job_id: str, *, yes: bool | None = None) -> str:
        """Recover a job that lost a node and waits for it (needs_nodes), or whose supervisor
        was killed (lost), as `skyinfra jobs recover JOB` does: its lost nodes replaced as
        ``up`` replaces them (``yes`` as for ``up``), the current directory copied to them
        (call it from the project's folder, as the job was started), the job started as its
        next attempt and followed until it ends; the job's final state. A job that cannot be
        recovered raises UsageError, as the CLI exits 2."""
        from skyinfra.api.jobs import recover

        ws = self._existing()
        report = recover(
            ws,
            job_id,
            engine_factory=self._engine(ws.spec()),
            confirm=self._confirm(yes),
            echo=self._echo,
        )
        return report.job_state

    def _start(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        place: _Place,
        folder: Path,
        *,
        detach: bool,
    ) -> tuple[NodeTransport, RunReport, Call]:
        """What `skyinfra run` does, with the call as its entry (cli/running.py)."""
        from skyinfra import lifecycle, shared_state
        from skyinfra.api.calls import CALL_ENTRY, check_python, pickle_call
        from skyinfra.api.subset import priority_of, selected_nodes, world_size
        from skyinfra.errors import ClusterDownError
        from skyinfra.run import DEFAULT_KEEP_RUNS
        from skyinfra.run.ignore import topology_path_inside
        from skyinfra.run.launch import ClusterNodes, JobLaunch, Restarts
        from skyinfra.run.session import run_on_cluster
        from skyinfra.terraform.backend import has_backend
        from skyinfra.topology import read_topology
        from skyinfra.transport.readiness import wait_until_ready
        from skyinfra.validation import require_valid

        ws = self._existing()
        spec = ws.spec()
        require_valid(spec, guardrails=False)
        priority = priority_of(place.priority)  # UsageError before anything is pickled
        src = Path.cwd()
        call = pickle_call(fn, args, kwargs, folder, src)
        if has_backend(ws.path):  # another operator may have changed the cluster
            engine = self._engine(spec)(ws.path)
            shared_state.ensure_init(ws, engine)
            shared_state.refresh_topology(ws, spec, engine)
        if not ws.topology_file.is_file():
            raise ClusterDownError(ws.name)
        topology = read_topology(ws.topology_file)
        # nodes=K: the head picks K free ones (the job's world); a list: those, in rank order,
        # once free. Both go through the head's queue and get ports of their own.
        world = world_size(place.nodes, topology)
        chosen = None if world is not None else selected_nodes(place.nodes, topology)  # type: ignore[arg-type]
        echo = self._echo
        if chosen is not None:
            self._echo(
                f"[skyinfra] {call.name} runs on nodes {chosen}, as nodes 0 to "
                f"{len(chosen) - 1} of the call (instance_info().node)"
            )
        wait_s = lifecycle.default_wait_ready_s(spec)
        terminal = sys.stdout if sys.stdout.isatty() else None
        # Submissions overlap (the head's queue orders them), as `run`'s; verify's do not.
        with ws.lock(f"run {call.name}", shared=not spec.verify):
            transport: NodeTransport = lifecycle.transport_for(ws, topology, spec=spec)
            try:
                if call.by_value:  # the nodes' Python is known once they are ready
                    wait_until_ready(
                        transport, topology, timeout_s=wait_s, echo=echo, terminal=terminal
                    )
                    check_python(transport, chosen or [n.index for n in topology.nodes], call)
                if spec.verify:
                    from skyinfra.verify import gate

                    gate(ws, spec, topology, transport, wait_ready_s=wait_s, echo=self._echo)
                launch = JobLaunch(
                    entry=CALL_ENTRY,
                    src=src,
                    # The job-only fields as this object says (as `run` reads ./skyinfra.toml).
                    restarts=Restarts(
                        self.spec.max_restarts,
                        self.spec.retry_on,
                        lifecycle.head_recovery_of(ws, ws.spec()),
                    ),
                    run_files=call.files,
                    timeout_s=spec.run_timeout,
                    keep_runs=DEFAULT_KEEP_RUNS,
                    as_job=True,
                    detach=detach,
                    all_logs=self.all_logs,
                    extra_ignores=tuple(topology_path_inside(src, ws.path)),
                    world=world,
                    on=None if chosen is None else tuple(chosen),
                    priority=priority,
                    store_credentials=lifecycle.store_credentials_of(spec),
                )
                report = run_on_cluster(
                    launch,
                    ClusterNodes(transport, topology, ws.topology_file, ws.runs_dir),
                    echo=echo,
                    wait_ready_s=wait_s,
                    terminal=terminal,
                )
            except BaseException:
                transport.close()
                raise
        return transport, report, call

    def _raise_for(self, transport: NodeTransport, report: RunReport, call: Call) -> None:
        from skyinfra_runtime import exitcodes as node_exitcodes

        from skyinfra.api.calls import remote_error
        from skyinfra.run.report import describe_exit, raise_for_failure

        if report.first_failure is None:
            raise_for_failure(report)  # a timeout: RunTimeoutError, as `run` raises
            return
        outcomes = {
            i: {
                "exit_code": o.exit_code,
                "meaning": node_exitcodes.describe(o.exit_code),
                "ended_by_skyinfra": o.ended_by_us,
                "reason": describe_exit(o),
            }
            for i, o in report.outcomes.items()
        }
        first = report.first_failure
        raise remote_error(transport, call.name, report.run_id, report.run_dir, first, outcomes)


@dataclass(frozen=True)
class _Place:
    """Where and how a call queues on the head: ``nodes`` (K, a list, or None: every node)
    and its ``priority``."""

    nodes: Sequence[int] | int | None
    priority: object


def _arguments() -> dict[str, str]:
    """The arguments that set the fields an existing cluster otherwise keeps (spec.FLAG_KEYS),
    named for the kept-value lines as the CLI names its flags."""
    from skyinfra.spec import FLAG_KEYS

    return {key: f"{key}=" for key in FLAG_KEYS}
