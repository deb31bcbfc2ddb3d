"""The node runtime wheel: built without pip or a source tree, byte-for-byte reproducible,
valid enough for pip to install and run its console script."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import skyinfra_runtime

from skyinfra import wheel
from skyinfra.errors import RuntimeWheelError
from tests.conftest import make_venv, offline_pip_env

INFO = "skyinfra_runtime-0.1.0.dist-info"


def test_two_builds_give_the_same_bytes(tmp_path: Path) -> None:
    first = wheel.build_runtime_wheel(cache=tmp_path / "a")
    second = wheel.build_runtime_wheel(cache=tmp_path / "b")
    assert first.sha256 == second.sha256
    assert first.path.read_bytes() == second.path.read_bytes()
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == first.sha256
    assert first.path == tmp_path / "a" / first.sha256 / "skyinfra_runtime-0.1.0-py3-none-any.whl"
    again = wheel.build_runtime_wheel(cache=tmp_path / "a")  # from the cache
    assert again == first


def test_wheel_holds_the_installed_runtime_and_its_metadata(tmp_path: Path) -> None:
    built = wheel.build_runtime_wheel(cache=tmp_path)
    package_dir = Path(skyinfra_runtime.__file__).parent
    with zipfile.ZipFile(built.path) as archive:
        names = archive.namelist()
        expected = sorted(
            f"skyinfra_runtime/{p.relative_to(package_dir).as_posix()}"
            for p in package_dir.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
        assert names[: len(expected)] == expected
        assert "skyinfra_runtime/py.typed" in names
        assert names[len(expected) :] == [
            f"{INFO}/METADATA",
            f"{INFO}/WHEEL",
            f"{INFO}/entry_points.txt",
            f"{INFO}/RECORD",
        ]
        for name in expected:
            assert archive.read(name) == (package_dir / name.split("/", 1)[1]).read_bytes()
        assert {i.date_time for i in archive.infolist()} == {wheel.ZIP_EPOCH}
        metadata = archive.read(f"{INFO}/METADATA").decode()
        dist = importlib.metadata.distribution("skyinfra-runtime")
        assert "Name: skyinfra-runtime\n" in metadata
        assert f"Version: {dist.version}\n" in metadata
        assert f"Requires-Python: {dist.metadata['Requires-Python']}\n" in metadata
        assert "Tag: py3-none-any" in archive.read(f"{INFO}/WHEEL").decode()
        assert archive.read(f"{INFO}/entry_points.txt").decode() == (
            "[console_scripts]\nskyinfra-runtime = skyinfra_runtime.command:main\n"
        )
        rows = list(csv.reader(io.StringIO(archive.read(f"{INFO}/RECORD").decode())))
        assert [r[0] for r in rows] == names
        for name, digest, size in rows[:-1]:
            data = archive.read(name)
            raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={raw}", len(data))
        assert rows[-1] == [f"{INFO}/RECORD", "", ""]


def test_source_tree_and_environment_variable(
    tmp_path: Path, minimal_runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SKYINFRA_RUNTIME_DIR builds from a runtime source tree; a changed file changes the hash,
    byte code and hidden files do not."""
    monkeypatch.setenv(wheel.RUNTIME_DIR_ENV, str(minimal_runtime_dir))
    minimal = wheel.build_runtime_wheel(cache=tmp_path / "cache")
    assert minimal.path.name == "skyinfra_runtime-0.0.0-py3-none-any.whl"
    tree = tmp_path / "tree"
    shutil.copytree(minimal_runtime_dir, tree)
    same = wheel.build_runtime_wheel(tree, cache=tmp_path / "cache2")
    assert same.sha256 == minimal.sha256  # the wheel does not depend on where the tree is
    pkg = tree / "src" / "skyinfra_runtime"
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (pkg / ".x.py.swp").write_bytes(b"junk")
    assert wheel.build_runtime_wheel(tree, cache=tmp_path / "cache3").sha256 == minimal.sha256
    (pkg / "__init__.py").write_text('"""Changed."""\n')
    assert wheel.build_runtime_wheel(tree, cache=tmp_path / "cache4").sha256 != minimal.sha256


def test_a_tree_without_the_package_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "skyinfra-runtime"\n')
    with pytest.raises(RuntimeWheelError, match=r"src/skyinfra_runtime/__init__\.py"):
        wheel.build_runtime_wheel(tmp_path, cache=tmp_path / "cache")
    (tmp_path / "src" / "skyinfra_runtime").mkdir(parents=True)
    (tmp_path / "src" / "skyinfra_runtime" / "__init__.py").write_text("")
    with pytest.raises(RuntimeWheelError, match="name and version"):
        wheel.build_runtime_wheel(tmp_path, cache=tmp_path / "cache")


@pytest.mark.slow
def test_pip_installs_the_wheel_and_its_console_script_runs(tmp_path: Path) -> None:
    built = wheel.build_runtime_wheel(cache=tmp_path / "cache")
    python = make_venv(tmp_path / "venv")
    env = offline_pip_env(dict(os.environ))
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(built.path)],
        env=env, check=True, timeout=300,
    )  # fmt: skip
    script = tmp_path / "venv" / "bin" / "skyinfra-runtime"
    proc = subprocess.run(
        [str(script), "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launch" in proc.stdout
    where = subprocess.run(
        [str(python), "-c", "import skyinfra_runtime as r; print(r.__file__)"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(tmp_path / "venv" / "lib"))
    # pip checks RECORD on uninstall: every file it lists must be there and nothing more.
    check = subprocess.run(
        [str(python), "-m", "pip", "uninstall", "--yes", "skyinfra-runtime"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert not script.exists()
