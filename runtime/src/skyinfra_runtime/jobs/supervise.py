"""``skyinfra-runtime supervise``: one node's part of a job, detached (the agent; on the head
also the job's supervisor). Apart from the other job commands (commands.py), which need none of
what it imports."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from skyinfra_runtime import checkpoints, ckptsync, exitcodes, jobenv, s3, spot, warm
from skyinfra_runtime.jobplace import waits_for
from skyinfra_runtime.jobprio import Waiter, ahead_of
from skyinfra_runtime.jobrecord import JobPorts, JobState
from skyinfra_runtime.jobs import recovery
from skyinfra_runtime.jobs.agent import Agent, report_to_head
from skyinfra_runtime.jobs.files import (
    Paths,
    now,
    process_start_time,
    read_json,
    write_json,
)
from skyinfra_runtime.jobs.records import (
    holders,
    lock_job_starts,
    next_queue_seq,
    queued_jobs,
    starting,
)
from skyinfra_runtime.jobs.supervisor import Supervisor
from skyinfra_runtime.restarts import RETRY_ON

# In the node's folder of the job: its checkpoint set's directory as the job found it.
UNUSED_MARK = "checkpoints-unused.json"


def _daemonize(paths: Paths) -> int | None:
    """Detach: the caller gets the read end of a pipe the daemon writes its first line to (its
    pid and port) and returns None in the daemon. Two forks and setsid: no controlling
    terminal, not a child of the SSH channel or of skyinfra."""
    r, w = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(w)
        os.waitpid(pid, 0)
        return r
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.environ["SKYINFRA_JOB_READY_FD"] = str(w)
    paths.run.mkdir(parents=True, exist_ok=True)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(paths.agent_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    return None


def _ready(msg: dict[str, Any]) -> None:
    w = int(os.environ.pop("SKYINFRA_JOB_READY_FD"))
    os.write(w, (json.dumps(msg) + "\n").encode())
    os.close(w)


def read_private(stream: Any) -> dict[str, Any]:
    """What the operator sends on stdin, never on a command line or in a file: one JSON object
    with the job's token and the user's env and secrets (``{"token": "...", "env": {...},
    "secrets": {...}}``). Checked here too: names by jobenv's rules, string values."""
    raw = stream.read()
    data = json.loads(raw) if raw.strip() else {}
    if not isinstance(data, dict) or not isinstance(data.get("token", ""), str):
        raise ValueError("expected a JSON object with a string 'token'")
    for kind in ("env", "secrets"):
        table = data.setdefault(kind, {})
        if not isinstance(table, dict):
            raise ValueError(f"{kind!r}: expected a JSON object of names and values")
        for name, value in table.items():
            problem = jobenv.name_problem(name) or jobenv.value_problem(value)
            if problem:
                raise ValueError(f"{kind} {name!r}: expected {problem}")
    if s3.PRIVATE_KEY in data:  # the checkpoint store's, on nodes without a role (ssh)
        try:
            data[s3.PRIVATE_KEY] = s3.Credentials.from_private(data[s3.PRIVATE_KEY])
        except ValueError as err:
            raise ValueError(f"{s3.PRIVATE_KEY!r}: {err}") from None
    if "recover" in data:  # the head's alone: the command that recovers the job unattended
        problem = recovery.problem(data["recover"])
        if problem:
            raise ValueError(f"'recover': {problem}")
    return data


def supervise(ns: argparse.Namespace) -> int:
    paths = Paths(Path(ns.node_dir), ns.job)
    argv = list(ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv)
    if not argv:
        print("skyinfra-runtime supervise: no launcher command after --", file=sys.stderr)
        return exitcodes.USAGE
    private: dict[str, Any] = {"token": "", "env": {}, "secrets": {}}
    if ns.private_stdin:
        try:
            private = read_private(sys.stdin)
        except ValueError as err:  # json.JSONDecodeError is one
            # Never the input itself: it holds secrets.
            print(f"skyinfra-runtime supervise: stdin: {err}", file=sys.stderr)
            return exitcodes.USAGE
    if ns.max_restarts < 0:
        print(
            f"skyinfra-runtime supervise: --max-restarts {ns.max_restarts}: expected 0 or more",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    if ns.retry_on not in RETRY_ON:
        print(
            f"skyinfra-runtime supervise: --retry-on {ns.retry_on!r}: expected one of "
            f"{', '.join(RETRY_ON)}",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    if ns.node != 0 and not ns.head:
        print("skyinfra-runtime supervise: a peer needs --head HOST:PORT", file=sys.stderr)
        return exitcodes.USAGE
    name = ns.checkpoints or ns.job
    if checkpoints.name_problem(name):
        print(
            f"skyinfra-runtime supervise: --checkpoints: checkpoint set name {name!r}: "
            f"expected {checkpoints.name_problem(name)}",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    sup: Supervisor | None = None
    server = None
    listen = ns.listen
    start_lock = None
    queued: dict[str, Any] | None = None
    start: tuple[tuple[int, ...], JobPorts] | None = None
    on = _named_nodes(ns.on, ns.nodes) if ns.on else None
    want = len(on) if on else ns.world or ns.nodes
    seq = 0
    if ns.node == 0:
        if on == ():
            print(
                f"skyinfra-runtime supervise: --on {ns.on!r}: expected distinct node indices "
                f"from 0 to {ns.nodes - 1}, comma-separated",
                file=sys.stderr,
            )
            return exitcodes.USAGE
        if not 1 <= want <= ns.nodes:
            print(
                f"skyinfra-runtime supervise: --world {ns.world}: expected 1 to {ns.nodes} "
                "(the cluster's nodes)",
                file=sys.stderr,
            )
            return exitcodes.USAGE
        # A job starts when the nodes it asks for are free and no job submitted before it
        # still waits (first in, first out), with nodes and ports of its own; else it is
        # queued and its supervisor starts it when its turn comes (Supervisor.wait_in_queue).
        # The lock (held by this caller until the daemon below has written its record) makes
        # the check and the record one step for every start, so the submission order is the
        # queue's and no two live jobs get the same nodes or ports.
        # Priorities: jobs of a higher one are ahead of it in the queue (jobprio.py).
        start_lock = lock_job_starts(Path(ns.node_dir))
        held = holders(Path(ns.node_dir), ns.nodes, but=ns.job)
        seq = next_queue_seq(Path(ns.node_dir))
        waiting = queued_jobs(Path(ns.node_dir), but=ns.job)
        ahead = ahead_of(Waiter(ns.job, ns.priority, seq), waiting)
        start = None if ahead else starting(Path(ns.node_dir), ns.nodes, want, ns.job, held, on)
        if start is None:
            queued = {
                "seq": seq,
                "queued_at": now(),
                "position": len(ahead) + 1,
                "held_by": held[0][0] if held else None,
                "waits_for": waits_for(ns.nodes, want, held, [w.job for w in ahead], on),
            }
        try:
            server = socket.create_server((listen, 0))
        except OSError:
            # An address this machine does not have: an emulated node (AWS faked on this
            # machine), whose peers are on loopback too. The operator tells peers what we say.
            listen = "127.0.0.1"
            server = socket.create_server((listen, 0))
    # The job's checkpoint set (default: one of its own, named by the job id); made only for
    # a job that starts (not for one refused above).
    try:
        ckpt_env = checkpoints.job_env(ns.node_dir, name)
        unused = checkpoints.unused_mark(ckpt_env[checkpoints.CHECKPOINT_DIR_ENV])
    except (ValueError, OSError) as err:
        if server is not None:
            server.close()
        print(f"skyinfra-runtime supervise: --checkpoints: {err}", file=sys.stderr)
        return exitcodes.USAGE
    r = _daemonize(paths)
    if r is not None:  # the caller: say what the daemon said, then go
        if server is not None:
            server.close()
        with os.fdopen(r, "rb") as f:
            line = f.readline().decode()
        if not line:
            print(f"skyinfra-runtime: the agent did not start; see {paths.agent_log}")
            return exitcodes.SETUP_FAILED
        print(line, end="", flush=True)
        # The operator takes this process's end (its output's end of file) as the agent's
        # start, and starts the job's peers only then: no interpreter teardown (30-50 ms of
        # every job's start) in between. Nothing is left to flush or close here.
        sys.stderr.flush()
        os._exit(exitcodes.OK)
    if start_lock is not None:
        os.close(start_lock)  # the daemon's copy (the caller's lock stays the caller's)
    try:
        agent = Agent(
            paths,
            ns.node,
            argv,
            env={
                **private["env"],
                **private["secrets"],
                **jobenv.secret_names_env(private["secrets"]),
                **warm.job_names_env([*private["env"], *private["secrets"]]),
                **ckpt_env,
            },
            hidden=jobenv.masks([*private["secrets"].values(), *_store_secrets(private)]),
            attempt=ns.attempt,
        )
        paths.pid_file.parent.mkdir(parents=True, exist_ok=True)
        # For the end of the job, and for a cancel of one that waits for its lost nodes.
        set_dir = ckpt_env[checkpoints.CHECKPOINT_DIR_ENV]
        write_json(paths.run / UNUSED_MARK, {**unused, "dir": set_dir})
        write_json(paths.node_state, {"node": ns.node, "state": "starting"})
        pid_tmp = paths.pid_file.with_name(f".{paths.pid_file.name}.tmp")
        fd = os.open(pid_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()} {process_start_time(os.getpid()) or ''}\n")
        os.replace(pid_tmp, paths.pid_file)
        _checkpoints(agent, paths, private.get(s3.PRIVATE_KEY))
        _watch_notices(agent, Path(ns.node_dir))
        if server is not None:
            meta = json.loads(ns.meta) if ns.meta else {}
            sup = Supervisor(
                agent,
                ns.nodes,
                meta,
                ns.timeout,
                token=private["token"],
                max_restarts=ns.max_restarts,
                retry_on=ns.retry_on,
                recover=private.get("recover"),
            )
            sup.want, sup.priority, sup.seq, sup.on = want, ns.priority, seq, on
            if queued is not None:
                sup.enqueue(queued)
            if start is not None:
                sup.take_start(*start)
            sup.save()
            threading.Thread(target=sup.serve, args=(server,), daemon=True).start()
            ready = {"pid": os.getpid(), "host": listen, "port": server.getsockname()[1]}
            if start is not None:
                ready.update(world=list(start[0]), ports=start[1].to_dict())
            _ready({**ready, **({"queued": queued} if queued is not None else {})})
            sup.run()
            server.close()
        else:
            _ready({"pid": os.getpid()})
            report_to_head(agent, ns.head, private["token"], wait_start=ns.wait_start)
        if agent.after_end is not None:  # not made above when the head could not be reached
            agent.after_end()
        _drop_unused_set(ns, sup, paths)
    finally:
        paths.pid_file.unlink(missing_ok=True)
        # Last: a follower that sees "ended" finds nothing of the node's part left.
        agent.save("ended")
    if sup is not None and sup.head_recovery is not None:
        # After every trace of this attempt's agent is gone: the next attempt's reuses them.
        recovery.run(sup.recover or {}, private["secrets"], paths, sup.attempt)
    return exitcodes.OK


def _named_nodes(text: str, total: int) -> tuple[int, ...]:
    """``--on 2,0``: those nodes, in rank order; () when it names no node of the cluster's
    ``total`` (or one twice)."""
    try:
        nodes = tuple(int(part) for part in text.split(","))
    except ValueError:
        return ()
    if len(set(nodes)) != len(nodes) or not all(0 <= n < total for n in nodes):
        return ()
    return nodes


def _drop_unused_set(ns: argparse.Namespace, sup: Supervisor | None, paths: Paths) -> None:
    """A job that never used its checkpoint set leaves none (checkpoints.remove_if_unused),
    removed when none of its workers can write any more. The local target's set is one folder
    that every node's workers write: the head removes it, once every node's launcher has
    ended (its supervisor's end), never a peer at its own end while the others may still
    write. Elsewhere each node has a folder of its own (AWS: after its final upload, so S3
    has no set either). A job that waits for a lost node goes on later on the same set."""
    if sup is not None and sup.state is JobState.NEEDS_NODES:
        return
    if ns.node != 0 and checkpoints.provider_of(ns.node_dir) == "local":
        return
    remove_set_if_unused(paths)


def remove_set_if_unused(paths: Paths) -> None:
    mark = read_json(paths.run / UNUSED_MARK)
    if isinstance(mark, dict) and isinstance(mark.get("dir"), str):
        checkpoints.remove_if_unused(mark["dir"], mark)


def _store_secrets(private: dict[str, Any]) -> list[str]:
    """The checkpoint store's secret values, masked in the node's log like the job's."""
    creds = private.get(s3.PRIVATE_KEY)
    return [v for v in (creds.secret, creds.token) if v] if creds is not None else []


def _checkpoints(agent: Agent, paths: Paths, credentials: s3.Credentials | None) -> None:
    """On a node with a checkpoint store (``checkpoints.json`` in the node dir, written by
    cloud-init on AWS, by the enrolment on the ssh target, whose agents get the operator's
    ``credentials`` on their stdin) and a job with a checkpoint directory: restore it before
    the launcher starts, upload every POLL_S while it runs (ckptsync.py), and once more when
    it ended, whichever way (SIGTERM included), before the node reports its exit."""
    # Each attempt of the job restores, syncs while it runs, and uploads once when it ended
    # (the next attempt's restore then reads what this one wrote).
    syncing: list[threading.Event] = []
    # The agent's own addition to its launcher's environment (checkpoints.job_env).
    directory = agent.env.get(checkpoints.CHECKPOINT_DIR_ENV, "")
    try:
        sync = ckptsync.from_settings(paths.node_dir, directory, agent.node, credentials)
    except (OSError, ValueError, KeyError) as err:
        problem = f"skyinfra: the node's checkpoint settings are unusable: {err}"
        agent.before_start = lambda: problem
        return
    if sync is None:
        return

    def restore() -> str | None:
        try:
            sync.restore()
        except (OSError, ValueError) as err:
            return f"skyinfra: could not restore the checkpoints into {directory}: {err}"
        stop = threading.Event()
        syncing.append(stop)
        threading.Thread(target=sync.run_until, args=(stop,), daemon=True).start()
        return None

    def final() -> None:
        # Once an attempt, and only after a whole restore: a node that could not restore
        # uploads nothing (its directory would hold other nodes' files it cannot tell from
        # its own).
        if syncing:
            syncing.pop().set()
            sync.final()

    agent.before_start = restore
    agent.after_end = final


def _watch_notices(agent: Agent, node_dir: Path) -> None:
    """On a node that says where its metadata service is (``notice.json``: AWS Spot nodes, and
    every local node with its stand-in), watch it for a Spot interruption notice while the
    job runs; elsewhere nothing is polled."""
    settings = spot.read_settings(node_dir)
    if settings is None:
        return
    url, poll_s = settings
    spot.NoticeWatcher(
        spot.Imds(url),
        poll_s,
        on_notice=agent.noticed,
        on_rebalance=lambda when: agent.note(
            f"EC2 recommends a rebalance (noticed {when}): an interruption may follow"
        ),
        on_error=lambda err: agent.note(f"the metadata service did not answer: {err}"),
    ).start()


# ----------------------------------------------------------------- the operator's asks
