"""The S3 wheelhouse's pure core (issue 46): its content address, the platform pip downloads
for, the error naming a requirement without a wheel, the index the nodes read, and what the
user data tells a private node to do (golden: tests/unit/golden/wheelhouse/;
SKYINFRA_UPDATE_GOLDEN=1 rewrites them). Staging it against moto and a node's offline install
are tests/integration/aws/test_wheelhouse.py."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest
import yaml

from skyinfra import resources
from skyinfra.errors import SpecError
from skyinfra.targets.aws.cloudinit import FETCH_SCRIPT, render_user_data
from skyinfra.targets.aws.wheelhouse import (
    NodePlatform,
    WheelFile,
    WheelhouseIndex,
    download_command,
    missing_wheel_error,
    node_platform,
    requirement_set,
    wheelhouse_key,
)
from tests.conftest import content_of
from tests.unit.aws.test_cloudinit import params

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wheelhouse"
INDEX_URL = (
    "https://skyinfra-staging-1-us-east-1.s3.us-east-1.amazonaws.com/_wheelhouse/k/index.json"
)
X86 = NodePlatform()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs (SKYINFRA_UPDATE_GOLDEN=1 rewrites it)"


def test_the_address_is_the_requirement_set_not_its_order_nor_the_cluster() -> None:
    one = requirement_set("jax[cuda12]==0.10.2", ["keras==3.6.0", "numpy"], "0.13.9")
    other = requirement_set("jax[cuda12]==0.10.2", ["numpy", " keras==3.6.0", "numpy"], "0.13.9")
    assert one == other == ("jax[cuda12]==0.10.2", "keras==3.6.0", "numpy", "uv==0.13.9")
    key = wheelhouse_key(one, X86)
    assert len(key) == 64 and key == wheelhouse_key(tuple(reversed(one)), X86)
    moved = {
        wheelhouse_key(one, NodePlatform(machine="aarch64")),
        wheelhouse_key(one, NodePlatform(python="3.10")),
        wheelhouse_key(requirement_set("jax[cuda13]==0.10.2", ["keras==3.6.0"], "0.13.9"), X86),
        wheelhouse_key(requirement_set(None, ["keras==3.6.0", "numpy"], "0.13.9"), X86),
    }
    assert key not in moved and len(moved) == 4


def test_the_platform_follows_the_instance_types_architecture() -> None:
    assert node_platform(("x86_64",)).name == "cp312 manylinux_2_39_x86_64"
    assert node_platform(("arm64",)).name == "cp312 manylinux_2_39_aarch64"
    assert node_platform(()) == X86  # skipped lookups: the DLAMI's default, x86_64
    with pytest.raises(SpecError) as caught:
        node_platform(("i386",))
    assert caught.value.field == "aws.instance_type"
    tags = X86.platform_tags()
    assert tags[0] == "manylinux_2_39_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64"} <= set(tags)


def test_the_download_command() -> None:
    command = download_command("python3", ("jax[cuda12]==0.10.2", "uv==0.13.9"), X86, "/tmp/w")
    check_golden("download-command.txt", "\n".join(command) + "\n")


def test_a_requirement_without_a_wheel_is_named_under_its_field() -> None:
    reqs = ("jax[cuda12]==0.10.2", "pyyaml==5.3", "uv==0.13.9")
    fields = {"pyyaml==5.3": "python_packages", "jax[cuda12]==0.10.2": "aws.jax_extra"}
    pip = "ERROR: No matching distribution found for pyyaml==5.3\n"
    err = missing_wheel_error(pip, reqs, X86, fields)
    assert (err.field, err.value) == ("python_packages", "pyyaml==5.3")
    assert "no wheel for the nodes' platform (cp312 manylinux_2_39_x86_64)" in str(err)
    err = missing_wheel_error("No matching distribution found for jax==0.10.2", reqs, X86, fields)
    assert err.field == "aws.jax_extra"
    err = missing_wheel_error("No matching distribution found for ml-dtypes", reqs, X86, fields)
    assert (err.field, err.value) == ("python_packages", "ml-dtypes")
    assert "a dependency of" in str(err)


def test_the_node_side_reads_the_operators_index(tmp_path: Path) -> None:
    """fetch-s3-object.py --wheelhouse reads the index the operator writes (its ``files``)."""
    index = WheelhouseIndex(
        key="k" * 64,
        requirements=("uv==0.13.9",),
        platform=X86.name,
        files=(WheelFile("uv-0.13.9-py3-none-any.whl", "a" * 64, 10),),
    )
    assert WheelhouseIndex.from_json(index.to_json()) == index
    script = tmp_path / "fetch.py"
    script.write_text(resources.read_text(FETCH_SCRIPT))
    fetched: list[tuple[str, str | None]] = []
    module = runpy.run_path(str(script))
    glob = module["wheelhouse"].__globals__

    def fake_main(url: str, region: str, output: str, sha256: str | None = None) -> None:
        fetched.append((url, sha256))
        if output.endswith("index.json"):
            Path(output).write_text(index.to_json())

    glob["main"] = fake_main
    module["wheelhouse"](INDEX_URL, "us-east-1", "f" * 64, str(tmp_path / "w"))
    base = INDEX_URL.rsplit("/", 1)[0]
    assert fetched == [(INDEX_URL, "f" * 64), (f"{base}/uv-0.13.9-py3-none-any.whl", "a" * 64)]


def test_a_private_nodes_user_data_installs_from_the_wheelhouse_only() -> None:
    document = render_user_data(params(wheelhouse=(INDEX_URL, "c" * 64)))
    parsed = yaml.safe_load(document)
    # No apt: no mirror is reachable; uv makes the venvs without python3-venv.
    assert "packages" not in parsed and "package_update" not in parsed
    files = {f["path"]: content_of(f) for f in parsed["write_files"]}
    check_golden("provision-settings.sh", files["/opt/skyinfra/provision-settings.sh"])
    # A public node's user data is as it was.
    public = yaml.safe_load(render_user_data(params()))
    assert public["packages"] == ["curl", "python3-venv"]
    public_files = {f["path"]: content_of(f) for f in public["write_files"]}
    assert "WHEELHOUSE" not in public_files["/opt/skyinfra/provision-settings.sh"]
