"""What one file provisioner copies to every host (issue 45, figure 20): the runtime wheel and
uv in a folder holding only them, hard-linked where the file system allows, made once."""

from __future__ import annotations

from pathlib import Path

from skyinfra.targets.ssh.enrol import payload


def test_the_wheel_and_uv_share_one_folder_made_once_per_pair(tmp_path: Path) -> None:
    wheel = tmp_path / "w" / "skyinfra_runtime-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"wheel")
    uv = tmp_path / "bin" / "uv-binary"
    uv.parent.mkdir()
    uv.write_bytes(b"uv")
    cache = tmp_path / "cache"
    got_wheel, got_uv = payload(wheel, "a" * 64, uv, cache=cache)
    assert got_wheel.parent == got_uv.parent and got_uv.name == "uv"
    assert sorted(p.name for p in got_uv.parent.iterdir()) == [wheel.name, "uv"]
    # Links, not copies: nothing is written per `up` or per host.
    assert got_wheel.stat().st_ino == wheel.stat().st_ino
    assert got_uv.read_bytes() == b"uv"
    assert payload(wheel, "a" * 64, uv, cache=cache) == (got_wheel, got_uv)
    # Another wheel gets a folder of its own; the first stays whole for an `up` using it.
    other_wheel, _ = payload(wheel, "b" * 64, uv, cache=cache)
    assert other_wheel.parent != got_wheel.parent and got_wheel.is_file()
    assert not [p for p in (cache / "ssh-payload").iterdir() if p.name.startswith(".")]
