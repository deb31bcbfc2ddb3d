"""The Spot notice's node side over real HTTP on loopback: the local IMDS stand-in speaks
IMDSv2 (a token first, 401 without one, 404 until a notice), the watcher's client reads the
notice and the rebalance recommendation from it, and a job's code reads the deadline."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from skyinfra_runtime import imds_standin, preemption_deadline, seconds_left, spot


@pytest.fixture
def standin() -> Iterator[tuple[str, imds_standin.StandIn]]:
    server, state = imds_standin.serve("127.0.0.1", poll_interval_s=0.02)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def call(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=body)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def interrupt(base: str, seconds: float) -> dict[str, str]:
    code, body = call(
        base + imds_standin.INTERRUPT_PATH, "POST", body=json.dumps({"seconds": seconds}).encode()
    )
    assert code == 200, body
    return dict(json.loads(body))


def test_the_standin_wants_a_token_and_answers_404_until_a_notice(
    standin: tuple[str, imds_standin.StandIn],
) -> None:
    base, _ = standin
    # No TTL header: refused, as IMDSv2 refuses it.
    assert call(base + spot.TOKEN_PATH, "PUT")[0] == 400
    assert call(base + spot.TOKEN_PATH, "PUT", {spot.TOKEN_TTL_HEADER: "0"})[0] == 400
    code, token = call(base + spot.TOKEN_PATH, "PUT", {spot.TOKEN_TTL_HEADER: "60"})
    assert code == 200 and len(token) >= 32
    # Without a token, or with a wrong one: 401.
    assert call(base + spot.INSTANCE_ACTION)[0] == 401
    assert call(base + spot.INSTANCE_ACTION, headers={spot.TOKEN_HEADER: "nope"})[0] == 401
    with_token = {spot.TOKEN_HEADER: token}
    assert call(base + spot.INSTANCE_ACTION, headers=with_token)[0] == 404
    assert call(base + spot.REBALANCE, headers=with_token)[0] == 404

    before = time.time()
    notice = interrupt(base, 30)
    assert notice["action"] == "terminate"
    code, body = call(base + spot.INSTANCE_ACTION, headers=with_token)
    assert code == 200 and json.loads(body) == notice
    when = spot.parse_time(notice["time"])
    assert before + 30 <= when <= time.time() + 32
    code, body = call(base + spot.REBALANCE, headers=with_token)
    assert code == 200 and "noticeTime" in json.loads(body)
    # The first notice stands, as EC2 sends one per instance.
    assert interrupt(base, 5) == notice


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"seconds": -1}', b'{"seconds": "x"}', b'{"seconds": 10, "action": "boom"}'],
)
def test_a_bad_interrupt_is_refused_and_changes_nothing(
    standin: tuple[str, imds_standin.StandIn], body: bytes
) -> None:
    base, state = standin
    code, said = call(base + imds_standin.INTERRUPT_PATH, "POST", body=body)
    assert code == 400, said
    assert state.notice is None


def test_the_watcher_reads_the_notice_once_and_stops(
    standin: tuple[str, imds_standin.StandIn],
) -> None:
    base, _ = standin
    notices: list[spot.Notice] = []
    rebalances: list[str] = []
    seen = threading.Event()

    def on_notice(notice: spot.Notice) -> None:
        notices.append(notice)
        seen.set()

    watcher = spot.NoticeWatcher(spot.Imds(base), 0.05, on_notice, rebalances.append)
    assert watcher.poll_once() is None  # nothing yet: 404
    watcher.start()
    time.sleep(0.2)
    assert notices == []
    said = interrupt(base, 120)
    assert seen.wait(5)
    time.sleep(0.2)
    assert len(notices) == 1
    assert notices[0].action == "terminate"
    assert notices[0].time == spot.parse_time(said["time"])
    assert abs(notices[0].noticed_at - time.time()) < 5


def test_the_client_gets_a_new_token_when_the_old_one_is_refused(
    standin: tuple[str, imds_standin.StandIn],
) -> None:
    base, state = standin
    imds = spot.Imds(base)
    assert imds.instance_action() is None
    state.tokens.clear()  # expired, as a token past its TTL is
    assert imds.instance_action() is None


def test_a_service_that_does_not_answer_is_said_once(tmp_path: Path) -> None:
    server, _ = imds_standin.serve("127.0.0.1", poll_interval_s=0.02)
    port = server.server_address[1]
    server.shutdown()
    server.server_close()  # nothing listens there now
    errors: list[str] = []
    watcher = spot.NoticeWatcher(
        spot.Imds(f"http://127.0.0.1:{port}", timeout_s=1),
        0.01,
        lambda n: None,
        on_error=errors.append,
    )
    assert watcher.poll_once() is None and watcher.poll_once() is None
    assert len(errors) == 1


def test_a_jobs_code_reads_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(spot.DEADLINE_ENV, raising=False)
    assert preemption_deadline() is None and seconds_left() is None
    path = tmp_path / "run" / "preempt-deadline"
    monkeypatch.setenv(spot.DEADLINE_ENV, str(path))
    assert preemption_deadline() is None  # set up front; the file comes with a notice
    deadline = time.time() + 90
    spot.write_deadline(path, deadline)
    assert preemption_deadline() == pytest.approx(deadline, abs=0.001)
    left = seconds_left()
    assert left is not None and 85 < left <= 90
    assert path.stat().st_mode & 0o777 == 0o600
    spot.write_deadline(path, time.time() - 5)
    assert seconds_left() == 0.0


def test_settings_name_the_service_or_nothing_is_watched(tmp_path: Path) -> None:
    assert spot.read_settings(tmp_path) is None
    (tmp_path / spot.SETTINGS_FILE).write_text('{"imds": "http://127.0.0.9:1234", "poll_s": 0.5}')
    assert spot.read_settings(tmp_path) == ("http://127.0.0.9:1234", 0.5)
    (tmp_path / spot.SETTINGS_FILE).write_text('{"poll_s": -3}')
    assert spot.read_settings(tmp_path) == (spot.AWS_IMDS, spot.DEFAULT_POLL_S)
    (tmp_path / spot.SETTINGS_FILE).write_text("[]")
    assert spot.read_settings(tmp_path) is None


def test_notice_times_are_ec2s_utc_seconds() -> None:
    assert spot.parse_time("2026-11-24T08:22:00Z") == 1795508520.0
    assert spot.format_time(1795508520.0) == "2026-11-24T08:22:00Z"


def test_an_idle_node_says_its_notice_when_asked(
    standin: tuple[str, imds_standin.StandIn], tmp_path: Path
) -> None:
    """`skyinfra-runtime notice` (what `skyinfra status` runs on every ready node): with no
    job's agent watching, the node asks its metadata service and records what it says; no
    notice, or no notice.json (an On-Demand node): {}."""
    import subprocess
    import sys

    base, _ = standin

    def asked(node_dir: Path) -> dict[str, object]:
        argv = [sys.executable, "-m", "skyinfra_runtime", "notice", "--node-dir", str(node_dir)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        return dict(json.loads(done.stdout))

    on_demand = tmp_path / "on-demand"
    on_demand.mkdir()
    assert asked(on_demand) == {}
    node = tmp_path / "spot"
    node.mkdir()
    (node / spot.SETTINGS_FILE).write_text(json.dumps({"imds": base, "poll_s": 0.1}))
    assert asked(node) == {} and not (node / spot.INTERRUPTION_FILE).exists()
    sent = interrupt(base, 90)
    said = asked(node)
    assert said["action"] == "terminate" and said["time_utc"] == sent["time"], (said, sent)
    assert json.loads((node / spot.INTERRUPTION_FILE).read_text()) == said
    assert asked(node) == said  # recorded: the next look does not ask again


def test_send_reaches_the_nodes_standin_as_the_ssh_target_runs_it_on_the_host(
    standin: tuple[str, imds_standin.StandIn], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`imds-standin --node-dir D --send N` (what `drill interrupt` runs on an ssh host): the
    notice posted to the stand-in notice.json names, its answer printed; a node without one
    is exit 2, nothing sent; a refused notice is exit 1 with the stand-in's words."""
    base, state = standin
    assert imds_standin.main(["--node-dir", str(tmp_path), "--send", "30"]) == 2
    assert "has no IMDS stand-in" in capsys.readouterr().out and state.notice is None
    (tmp_path / spot.SETTINGS_FILE).write_text(json.dumps({"imds": base, "poll_s": 0.1}))
    assert imds_standin.main(["--node-dir", str(tmp_path), "--send", str(10**6)]) == 1
    assert "refused the notice: seconds: 0 to 3600" in capsys.readouterr().out
    assert imds_standin.main(["--node-dir", str(tmp_path), "--send", "30"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert state.notice == answer and answer["action"] == "terminate"
