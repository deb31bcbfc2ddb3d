"""The engine answers `state list` and `output` from a workspace's local state file without
starting Terraform (skyinfra/terraform/local_state.py): the answers must be Terraform's own,
checked here against real `terraform state list` / `output -json` on a real applied state
with count (11 module instances: [10] after [2]), for_each keys that need quoting, a data
source and nested module instances; where only Terraform knows (a backend, another Terraform
workspace), it is asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyinfra.terraform import EmbeddedTerraform, local_state
from skyinfra.terraform.backend import BACKEND_FILE

ROOT = """
resource "terraform_data" "counted" {
  count = 2
  input = count.index
}

resource "terraform_data" "keyed" {
  for_each = toset(["node-0", "with \\"quote\\"", "b"])
  input    = each.key
}

resource "terraform_data" "single" {
  input = "one"
}

data "terraform_remote_state" "itself" {
  backend = "local"
  config = {
    path = "${path.module}/other.tfstate"
  }
  defaults = {
    seen = "default"
  }
}

module "inner" {
  source = "./inner"
  count  = 11 # [10] sorts after [2]: keys compare as numbers
  name   = "inner-${count.index}"
}

output "keys" {
  value = sort(keys(terraform_data.keyed))
}

output "secret" {
  value     = "s3cr3t"
  sensitive = true
}

output "inner" {
  value = module.inner[*].names
}
"""

INNER = """
variable "name" {
  type = string
}

resource "terraform_data" "here" {
  for_each = toset(["x", "y"])
  input    = "${var.name}-${each.key}"
}

module "deeper" {
  source = "./deeper"
}

output "names" {
  value = [for k, v in terraform_data.here : v.output]
}
"""

DEEPER = """
resource "terraform_data" "leaf" {
  input = "leaf"
}
"""


def test_local_state_answers_as_terraform_does(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(ROOT)
    (tmp_path / "inner" / "deeper").mkdir(parents=True)
    (tmp_path / "inner" / "main.tf").write_text(INNER)
    (tmp_path / "inner" / "deeper" / "main.tf").write_text(DEEPER)
    (tmp_path / "other.tfstate").write_text(
        json.dumps({"version": 4, "terraform_version": "1.9.0", "serial": 1,
                    "lineage": "x", "outputs": {}, "resources": []})
    )  # fmt: skip
    engine = EmbeddedTerraform(tmp_path)
    engine.init()
    engine.apply()

    state = local_state.read(tmp_path, {})
    assert state is not None and state["resources"]
    code, listed, err = engine.command(["state", "list", "-no-color"])
    assert code == 0, err
    terraform_says = [line for line in listed.splitlines() if line.strip()]
    assert local_state.addresses(state) == terraform_says
    assert 'terraform_data.keyed["with \\"quote\\""]' in terraform_says
    assert "data.terraform_remote_state.itself" in terraform_says
    assert "module.inner[1].module.deeper.terraform_data.leaf" in terraform_says
    assert engine.state_list() == terraform_says

    code, out, err = engine.command(["output", "-json", "-no-color"])
    assert code == 0, err
    assert local_state.output_values(state) == {k: v["value"] for k, v in json.loads(out).items()}
    assert engine.output()["secret"] == "s3cr3t"

    code, pulled, err = engine.command(["state", "pull"])
    assert code == 0, err
    identity = {k: json.loads(pulled)[k] for k in ("lineage", "serial")}
    assert engine.state_identity() == identity

    engine.destroy()
    assert local_state.addresses(local_state.read(tmp_path, {}) or {}) == []
    code, pulled, err = engine.command(["state", "pull"])
    assert code == 0, err
    after = engine.state_identity()
    assert after == {k: json.loads(pulled)[k] for k in ("lineage", "serial")}
    assert after is not None and after["serial"] > identity["serial"]  # the destroy bumped it


def test_only_terraform_knows_where_the_state_is_not_the_local_file(tmp_path: Path) -> None:
    assert local_state.read(tmp_path, {}) == {}  # nothing applied yet
    (tmp_path / "terraform.tfstate").write_text(json.dumps({"version": 3, "modules": []}))
    assert local_state.read(tmp_path, {}) is None  # an older format: Terraform reads it
    (tmp_path / "terraform.tfstate").write_text('{"version": 4, "resou')
    assert local_state.read(tmp_path, {}) is None  # cut short: Terraform says what is wrong
    (tmp_path / "terraform.tfstate").write_text(json.dumps({"version": 4, "resources": []}))
    assert local_state.read(tmp_path, {}) == {"version": 4, "resources": []}
    assert local_state.read(tmp_path, {"TF_WORKSPACE": "staging"}) is None

    cache = tmp_path / ".terraform" / "terraform.tfstate"
    cache.parent.mkdir()
    cache.write_text(json.dumps({"backend": {"type": "s3", "config": {"bucket": "b"}}}))
    assert local_state.read(tmp_path, {}) is None  # a backend written into main.tf by hand
    cache.write_text(json.dumps({"backend": {"type": "local", "config": {"path": "x.tfstate"}}}))
    assert local_state.read(tmp_path, {}) is None  # the local backend, elsewhere
    cache.unlink()
    (tmp_path / BACKEND_FILE).write_text('terraform {\n  backend "s3" {}\n}\n')
    assert local_state.read(tmp_path, {}) is None  # skyinfra's shared state


def test_the_state_identity_is_read_from_the_local_file_without_terraform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local state: lineage and serial come from the file, no Terraform command runs (each
    would hash the providers); no state yet is None, as `state pull`'s empty answer was."""
    engine = EmbeddedTerraform(tmp_path)
    ran: list[list[str]] = []
    monkeypatch.setattr(engine, "command", lambda args, **_: ran.append(list(args)) or (1, "", ""))
    assert engine.state_identity() is None
    (tmp_path / "terraform.tfstate").write_text(
        json.dumps({"version": 4, "serial": 7, "lineage": "l-1", "resources": []})
    )
    assert engine.state_identity() == {"lineage": "l-1", "serial": 7}
    assert ran == []
    (tmp_path / BACKEND_FILE).write_text('terraform {\n  backend "s3" {}\n}\n')
    assert engine.state_identity() is None  # a backend: Terraform is asked (here it fails)
    assert ran == [["state", "pull"]]
