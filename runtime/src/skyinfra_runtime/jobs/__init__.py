"""Jobs that outlive the operator: ``skyinfra-runtime supervise``, ``logs``, ``cancel``, ``jobs``.

A job is one run of ENTRY on every node. On each node an *agent* (``supervise``) owns that
node's launcher: it detaches from whoever started it (double fork, its own session, stdio to
files, a pid file), so neither ``skyinfra`` nor the SSH channel that started it can end it by
going away. The agent keeps the node's full log in the run directory (``output.log``) and its
state in ``node.json``.

The agent on node 0 (the head) is the job's supervisor. The operator starts it first; it listens
on the head's private address (an ephemeral port, a per-job token) and the operator then starts
one agent per peer, told where the head listens. The token, and the user's env and secrets,
reach each agent on its stdin (``--private-stdin``), never on a command line, in the environment
of a process the job's code could read it from, or in a file; the agent adds env and secrets to
its launcher's environment only, and masks the secrets' values in the log. Peers report to the
head over that TCP connection (started, last output time, exit code) and end their launcher when
the head says so or when the connection drops. This needs nothing the cluster does not already
have on both targets (the nodes reach the head's address for the frameworks' rendezvous, and the
operator already reaches every node), where reaching peers from the head would need SSH keys on
the head. The supervisor enforces fail-fast (the first failing node ends the others) and the
timeout, and records the job in ``<head node dir>/jobs/<id>.json`` (atomic writes, 0600).

Standard library only: this runs on the nodes. The parts: ``files`` (where a job's files are
on a node, how they are written), ``records`` (the head's records, queue and start lock),
``wire`` (peer <-> head messages), ``agent`` (one node's launcher, a peer's reports),
``supervisor`` (the head), ``commands`` (the command line). The record's schema is
``skyinfra_runtime.jobrecord``, outside this package: the operator reads records through it.
"""

from skyinfra_runtime.jobs.commands import main

__all__ = ["main"]
