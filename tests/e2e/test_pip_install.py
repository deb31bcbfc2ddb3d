"""skyinfra as a new user gets it: both wheels built from a clean copy of the repository,
installed with pip into a fresh virtual environment outside the repository, then
`skyinfra up / run / status / down` of a 2-node local cluster from an empty directory.

pip reaches no package index: the dependencies come from the wheelhouse that `make
wheelhouse` (run by `make test`) fills at setup time; without it the test skips (fails in CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skyinfra.wheel import build_runtime_wheel
from tests.conftest import REPO_ROOT, make_venv, offline_pip_env, require_wheelhouse

pytestmark = pytest.mark.slow

VERSION = "0.1.0"
# What a clean checkout would not hold: environments, caches, build output, workspaces.
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", ".wheelhouse", ".skyinfra", "build", "dist", "*.egg-info", "__pycache__",
    ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".terraform", "*.tfstate*",
)  # fmt: skip


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh venv holding the wheels built from this repository."""
    wheelhouse = require_wheelhouse()
    root = tmp_path_factory.mktemp("pip-install")
    assert not root.resolve().is_relative_to(REPO_ROOT.resolve())
    env = offline_pip_env(dict(os.environ))
    # A copy, so that no build/ or egg-info of an earlier build can leak into the wheels.
    src = root / "src"
    shutil.copytree(REPO_ROOT, src, symlinks=True, ignore=COPY_IGNORE)
    dist = root / "dist"
    for project in (src, src / "runtime"):
        run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
             str(project)],
            cwd=root, env=env,
        )  # fmt: skip
    assert sorted(p.name for p in dist.glob("*.whl")) == [
        f"skyinfra-{VERSION}-py3-none-any.whl",
        f"skyinfra_runtime-{VERSION}-py3-none-any.whl",
    ]
    shutil.rmtree(src)  # from here on nothing of the source tree exists outside the repo
    python = make_venv(root / "venv")
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index",
         "--find-links", str(dist), "--find-links", str(wheelhouse), f"skyinfra=={VERSION}"],
        cwd=root, env=env,
    )  # fmt: skip
    return python.parent


def test_installed_skyinfra_runs_a_cluster_from_an_empty_directory(
    installed: Path, tmp_path: Path
) -> None:
    env = offline_pip_env({k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")})
    env["SKYINFRA_CACHE"] = str(tmp_path / "cache")
    env["SKYINFRA_TF_PLUGIN_CACHE"] = str(tmp_path / "tf-plugins")
    project = tmp_path / "empty"
    project.mkdir()
    skyinfra = str(installed / "skyinfra")

    # The installed package is a plain copy: no path back into the repository.
    where = run(
        [str(installed / "python"), "-c",
         "import skyinfra, skyinfra_runtime; print(skyinfra.__file__, skyinfra_runtime.__file__)"],
        cwd=project, env=env,
    )  # fmt: skip
    site = installed.parent / "lib"
    assert all(Path(p).is_relative_to(site) for p in where.stdout.split()), where.stdout

    up = run(
        [skyinfra, "up", "--name", "pip", "--provider", "local", "--nodes", "2"],
        cwd=project,
        env=env,
    )
    try:
        assert "is up: 2 node(s)" in up.stdout
        ws = project / ".skyinfra" / "clusters" / "pip"
        # A self-contained workspace: its own module copy and script, no installation path.
        assert (ws / "modules" / "local" / "main.tf").is_file()
        assert (ws / "scripts" / "bootstrap-node.sh").is_file()
        # The node wheel is rebuilt from the installed runtime, byte-for-byte the one this
        # (editable) environment builds from the same sources.
        tfvars = (ws / "terraform.tfvars.json").read_text()
        assert f'"{build_runtime_wheel(cache=tmp_path / "here").sha256}"' in tfvars
        for name in ("main.tf", "modules/local/main.tf"):
            text = (ws / name).read_text()
            assert str(site) not in text and str(REPO_ROOT) not in text, name

        (project / "count.py").write_text(
            "from skyinfra_runtime import instance_info\n\n\n"
            "def main():\n"
            "    return instance_info().total_nodes\n"
        )
        result = run([skyinfra, "run", "--cluster", "pip", "count.py:main"], cwd=project, env=env)
        assert "node-0 worker 0: 2" in result.stdout and "node-1 worker 0: 2" in result.stdout
        runs = sorted(p for p in (ws / "runs").iterdir() if p.is_dir())
        summary = json.loads((runs[-1] / "summary.json").read_text())
        values = [w["value"] for n in summary["nodes"] for w in (n["result"] or {})["workers"]]
        assert values == [2, 2]

        status = run([skyinfra, "status", "--json"], cwd=project, env=env)
        info = json.loads(status.stdout)
        assert info["state"] == "up"
        assert [(n["index"], n["readiness"]) for n in info["nodes"]] == [(0, "ready"), (1, "ready")]
    finally:
        down = subprocess.run(
            [skyinfra, "down", "--yes", "--cluster", "pip"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert down.returncode == 0, down.stdout + down.stderr
    assert "is down" in down.stdout
    after = run([skyinfra, "status", "--json"], cwd=project, env=env)
    assert json.loads(after.stdout)["state"] == "down"


def test_validate_and_up_name_a_plugin_framework_the_nodes_interpreter_lacks(
    installed: Path, tmp_path: Path
) -> None:
    """This installation has no jax or keras, and local nodes use its site-packages: a spec
    with the jax and keras plugins is refused at `validate` and at `up` (exit 2, nothing
    made), naming what to install; the nodes' own python_packages, or a local.python that
    has them, are enough."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_CACHE"] = str(tmp_path / "cache")
    project = tmp_path / "project"
    project.mkdir()
    skyinfra = str(installed / "skyinfra")
    python = str(installed / "python")
    spec = 'name = "nojax"\nprovider = "local"\nnodes = 2\nplugins = ["jax", "keras:backend=jax"]\n'
    (project / "skyinfra.toml").write_text(spec)

    def cli(*argv: str, cwd: Path = project) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [skyinfra, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )

    validate = cli("validate")
    assert validate.returncode == 2, validate.stdout + validate.stderr
    said = validate.stderr
    assert f"plugin 'jax' (plugins[0]) needs jax, which does not import with {python}" in said
    assert f'`{python} -m pip install "jax[cpu]"`' in said, said
    # keras's backend is jax, named once (at the jax plugin).
    assert "plugin 'keras' (plugins[1]) needs keras" in said and "backend" not in said, said
    assert "Traceback" not in said
    problems = json.loads(cli("validate", "--json").stdout)
    assert [(p["field"], p["value"], p["line"]) for p in problems] == [
        ("plugins[0]", "jax", 4),
        ("plugins[1]", "keras", 4),
    ]

    empty = tmp_path / "empty"
    empty.mkdir()
    up = cli("up", "--name", "nojax", "--provider", "local", "--nodes", "2", "--plugin", "jax",
             cwd=empty)  # fmt: skip
    assert up.returncode == 2, up.stdout + up.stderr
    assert f'`{python} -m pip install "jax[cpu]"`' in up.stderr and "Traceback" not in up.stderr
    assert list(empty.iterdir()) == [], "up made nothing"

    # Installed on the nodes by the spec, or present in the interpreter the nodes use.
    (project / "skyinfra.toml").write_text(spec + 'python_packages = ["jax[cpu]", "Keras>=3"]\n')
    assert cli("validate").returncode == 0
    local = f"[local]\npython = {json.dumps(sys.executable)}\n"
    (project / "skyinfra.toml").write_text(spec + local)
    assert cli("validate").returncode == 0, "this suite's own interpreter has jax and keras"
