"""Rendering: golden files, determinism, self-contained workspaces, HCL literal escaping,
strict undefined."""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
import pytest

import skyinfra
from skyinfra import render, resources
from skyinfra.spec import validate_spec
from skyinfra.targets.local.target import local_context, local_files
from skyinfra.templating import hcl

REPO_ROOT = Path(__file__).resolve().parents[2]

GOLDEN = Path(__file__).parent / "golden" / "local"


def golden_context() -> dict[str, object]:
    spec = validate_spec(
        {
            "name": "demo",
            "nodes": 2,
            "python_packages": ["numpy>=1.26", "jax[cpu]"],
            "head_port": 29600,
        }
    )
    return local_context(
        spec,
        node_root=Path("/srv/skyinfra/demo/nodes"),
        python="/opt/python/bin/python3",
        wheel_path=Path("/cache/wheels/skyinfra_runtime-0.1.0-py3-none-any.whl"),
        wheel_sha256="ab" * 32,
    )


def test_local_root_matches_golden_files() -> None:
    rendered = local_files(golden_context())
    files = {name: rendered[name] for name in ("main.tf", "terraform.tfvars.json")}
    assert sorted(render.render_root("local", golden_context())) == ["main.tf"]
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        for name, text in files.items():
            (GOLDEN / name).write_text(text)
    for name, text in files.items():
        assert text == (GOLDEN / name).read_text(), f"{name} differs from its golden file"


def test_rendering_is_deterministic() -> None:
    assert render.render_root("local", golden_context()) == render.render_root(
        "local", golden_context()
    )


def test_local_workspace_is_self_contained() -> None:
    """The root calls ./modules/local, a byte-for-byte copy of infra/modules/local, and the
    bootstrap script is copied beside it: nothing points outside the workspace."""
    files = local_files(golden_context())
    assert sorted(files) == [
        "main.tf",
        "modules/local/main.tf",
        "modules/local/outputs.tf",
        "modules/local/variables.tf",
        "modules/local/versions.tf",
        "scripts/bootstrap-node.sh",
        "terraform.tfvars.json",
    ]
    assert 'source = "./modules/local"' in files["main.tf"]
    assert 'abspath("${path.module}/scripts/bootstrap-node.sh")' in files["main.tf"]
    infra = REPO_ROOT / "infra"
    for name, text in files.items():
        if name.startswith("modules/"):
            assert text == (infra / name).read_text(), name
    assert files["scripts/bootstrap-node.sh"] == (infra / "scripts/bootstrap-node.sh").read_text()
    assert files == local_files(golden_context())  # deterministic
    installed = str(Path(skyinfra.__file__).resolve().parent)
    for name, text in files.items():
        assert "../" not in text, f"{name} climbs out of the workspace"
        for forbidden in (installed, str(REPO_ROOT), str(infra)):
            assert forbidden not in text, f"{name} holds {forbidden}"


def test_modules_are_read_through_the_package() -> None:
    """What the workspace gets comes from skyinfra's package data (skyinfra/_infra)."""
    assert resources.list_files("modules/aws/nodes", (".tf",)) == [
        f"modules/aws/nodes/{n}" for n in ("main.tf", "outputs.tf", "variables.tf", "versions.tf")
    ]
    assert resources.bootstrap_script().startswith("#!/usr/bin/env bash\n")
    with pytest.raises(resources.ResourceError, match=r"infra/templates/none\.j2 is missing"):
        resources.read_text("templates/none.j2")
    with pytest.raises(ValueError, match="plain relative"):
        resources.read_text("../pyproject.toml")


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("plain", '"plain"'),
        ("has ${interp} and %{dir}", '"has $${interp} and %%{dir}"'),
        ('quote " and \\ back', '"quote \\" and \\\\ back"'),
        (None, "null"),
        (True, "true"),
        (3, "3"),
        (["a", 1], '["a", 1]'),
        ([], "[]"),
        ({"k": "v"}, '{\n  "k" = "v"\n}'),
    ],
)
def test_hcl_literals(value: object, literal: str) -> None:
    assert hcl(value) == literal


def test_missing_context_value_is_an_error() -> None:
    context = golden_context()
    del context["module_source"]
    with pytest.raises(jinja2.UndefinedError, match="module_source"):
        render.render_root("local", context)
