"""aws.max_lifetime_hours: the node ends itself once up that long, busy or not, through the
same timer and script as the idle shutdown (infra/scripts/idle-check.sh), here run for real
with stand-ins for shutdown, logger and who and a chosen uptime."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from skyinfra.errors import SpecError
from skyinfra.targets.aws.cloudinit import render_user_data
from skyinfra.targets.aws.spec_parsing import parse_aws_section
from tests.conftest import content_of
from tests.unit.aws.test_cloudinit import params

SERVICE = "/etc/systemd/system/skyinfra-idle.service"


def unit_files(**overrides: object) -> dict[str, str]:
    document = yaml.safe_load(render_user_data(params(**overrides)))
    return {f["path"]: content_of(f) for f in document.get("write_files", [])}


def run_check(files: dict[str, str], tmp_path: Path, uptime_s: int, *, busy: bool) -> bool:
    """Run idle-check.sh as its unit would; True: it shut the node down."""
    (line,) = [x for x in files[SERVICE].splitlines() if x.startswith("Environment=")]
    env = dict(pair.split("=", 1) for pair in line.removeprefix("Environment=").split())
    node, state = tmp_path / "node", tmp_path / "state"
    (node / "pids").mkdir(parents=True, exist_ok=True)
    state.mkdir(exist_ok=True)
    (state / "ready").write_text("")
    sleeper = subprocess.Popen(["sleep", "30"]) if busy else None
    try:
        if sleeper is not None:
            start = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
            (node / "pids" / "run.pid").write_text(f"{sleeper.pid} {start}\n")
        stubs, shut = tmp_path / "stubs", tmp_path / "shutdown-called"
        stubs.mkdir(exist_ok=True)
        shut.unlink(missing_ok=True)
        for name, body in {"shutdown": f'echo "$@" > {shut}', "logger": ":", "who": ":"}.items():
            (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
            (stubs / name).chmod(0o755)
        uptime = tmp_path / "uptime"
        uptime.write_text(f"{uptime_s}.42 100.00\n")
        script = tmp_path / "idle-check.sh"
        script.write_text(next(v for k, v in files.items() if k.endswith("/idle-check.sh")))
        env.update(
            STATE_DIR=str(state),
            NODE_DIR=str(node),
            UPTIME_FILE=str(uptime),
            PATH=f"{stubs}:/usr/bin:/bin",
        )
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return shut.is_file()
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()


def test_a_busy_node_ends_itself_at_its_lifetime(tmp_path: Path) -> None:
    files = unit_files(idle_shutdown_minutes=0, max_lifetime_minutes=90)
    assert "MAX_LIFETIME_MINUTES=90" in files[SERVICE]
    assert not run_check(files, tmp_path, 90 * 60 - 1, busy=True)
    assert run_check(files, tmp_path, 90 * 60, busy=True)
    # Idle shutdown off: an idle node before its lifetime keeps running.
    assert not run_check(files, tmp_path, 60, busy=False)


def test_no_lifetime_no_idle_no_timer() -> None:
    assert SERVICE not in unit_files(idle_shutdown_minutes=0)
    assert "MAX_LIFETIME_MINUTES" not in unit_files()[SERVICE]


@pytest.mark.parametrize("value", [0, -1, 721, "8", True])
def test_bad_lifetimes_name_the_field(value: object) -> None:
    raw = {"region": "us-east-1", "instance_type": "g5.xlarge", "ssh_cidrs": ["203.0.113.7/32"]}
    with pytest.raises(SpecError) as err:
        parse_aws_section({**raw, "max_lifetime_hours": value})
    assert err.value.field == "aws.max_lifetime_hours"
    assert parse_aws_section({**raw, "max_lifetime_hours": 8}).max_lifetime_hours == 8
