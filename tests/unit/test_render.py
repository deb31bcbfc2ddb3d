"""Rendering: golden files, determinism, HCL literal escaping, strict undefined."""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
import pytest

from skyinfra import render
from skyinfra.spec import validate_spec

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
    return render.local_context(
        spec,
        workspace_dir=render.REPO_ROOT / ".skyinfra" / "clusters" / "demo",
        node_root=Path("/srv/skyinfra/demo/nodes"),
        python="/opt/python/bin/python3",
        wheel_path=Path("/cache/wheels/skyinfra_runtime-0.1.0-py3-none-any.whl"),
        wheel_sha256="ab" * 32,
    )


def test_local_root_matches_golden_files() -> None:
    files = render.render_root("local", golden_context())
    assert sorted(files) == ["main.tf", "terraform.tfvars"]
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        for name, text in files.items():
            (GOLDEN / name).write_text(text)
    for name, text in files.items():
        assert text == (GOLDEN / name).read_text(), f"{name} differs from its golden file"


def test_rendering_is_deterministic() -> None:
    assert render.render_root("local", golden_context()) == render.render_root(
        "local", golden_context()
    )


def test_module_source_is_relative_from_any_workspace(tmp_path: Path) -> None:
    source = render.module_source(render.REPO_ROOT / ".skyinfra" / "clusters" / "x", "local")
    assert source == "../../../infra/modules/local"
    far = render.module_source(tmp_path / "team" / "clusters" / "x", "local")
    assert far.startswith("../")
    assert (
        tmp_path / "team" / "clusters" / "x" / far
    ).resolve() == render.INFRA_DIR / "modules" / "local"


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
    assert render.hcl(value) == literal


def test_missing_context_value_is_an_error() -> None:
    context = golden_context()
    del context["wheel_sha256"]
    with pytest.raises(jinja2.UndefinedError, match="wheel_sha256"):
        render.render_root("local", context)
