locals {
  wheel_name = basename(var.wheel_path)
}

# One enrolled host = one terraform_data. Creating it copies the bootstrap, the runtime wheel
# and uv into a folder of the node's own under the login user's home, and runs the bootstrap
# every target runs (a venv made with uv, the runtime installed and imported). Destroying it
# ends the node's processes and removes that folder. Every connection checks the host key
# pinned at first contact (host_key): a host presenting another key is refused.
resource "terraform_data" "node" {
  for_each = var.hosts

  input = {
    index           = each.value.index
    name            = each.key
    host            = each.value.host
    private_address = each.value.private_address
    port            = var.port
    user            = var.user
    node_dir        = each.value.node_dir
    host_key        = each.value.host_key
    key_path        = var.private_key_path
    instance_id     = "ssh-${var.cluster_name}-${each.value.index}"
  }

  triggers_replace = {
    host            = each.value.host
    port            = var.port
    user            = var.user
    node_dir        = each.value.node_dir
    python          = var.python
    wheel_sha256    = var.wheel_sha256
    python_packages = join(" ", var.python_packages)
    stage_sha256 = sha256(join("", [
      for f in sort(fileset("${var.stage_dir}/node-${each.value.index}", "**")) :
      filesha256("${var.stage_dir}/node-${each.value.index}/${f}")
    ]))
  }

  lifecycle {
    precondition {
      condition     = dirname(var.uv_path) == dirname(var.wheel_path) && basename(var.uv_path) == "uv"
      error_message = "uv_path must be \"uv\" in the wheel's folder (one upload copies both)."
    }
  }

  connection {
    type        = "ssh"
    host        = self.input.host
    port        = self.input.port
    user        = self.input.user
    private_key = file(self.input.key_path)
    host_key    = self.input.host_key
    agent       = false
    timeout     = "30s"
    # remote-exec's script (and the empty file Terraform leaves in its place) stays inside
    # the node's folder, which the destroy removes.
    script_path = "${self.input.node_dir}/.enrol/terraform-%RAND%.sh"
  }

  # A folder upload creates .skyinfra/<cluster>/node-<i>/.enrol under the home (scp -r).
  provisioner "file" {
    source      = "${var.stage_dir}/node-${each.value.index}/.skyinfra"
    destination = dirname(dirname(dirname(each.value.node_dir)))
  }

  # The wheel and uv in one upload (their folder holds only them: enrol.payload): every SSH
  # connection costs the host's sshd and Terraform CPU, and the hosts may share a machine.
  provisioner "file" {
    source      = "${dirname(var.wheel_path)}/"
    destination = "${each.value.node_dir}/.enrol"
  }

  # enrol.sh runs bootstrap-node.sh with these arguments (its output in .enrol/bootstrap.log;
  # on failure the log's tail in the node's failed marker, which `up` and `status` show),
  # then counts the host's GPUs and writes the ready marker.
  provisioner "remote-exec" {
    inline = [
      join(" ", concat(
        ["bash '${each.value.node_dir}/.enrol/enrol.sh' '${each.value.node_dir}'"],
        ["--python '${var.python}' --wheel '${each.value.node_dir}/.enrol/${local.wheel_name}'"],
        ["--uv '${each.value.node_dir}/.enrol/uv' --cache-dir '${each.value.node_dir}/.enrol/uv-cache'"],
        [for p in var.python_packages : "--package '${p}'"],
        # The node check (check-node.py, beside the bootstrap): the plugins' frameworks import.
        ["--check-topology '${each.value.node_dir}/.enrol/topology.json' --node-index ${each.value.index}"],
        # The node's stand-in for EC2's metadata service, on the host's loopback, which
        # `skyinfra drill interrupt` sends a notice to; it ends with the node.
        ["--imds-standin 127.0.0.1"],
      )),
    ]
  }

  # Destroy-time provisioners may only read self: everything they need is in its input.
  provisioner "remote-exec" {
    when = destroy
    inline = [
      # A folder already going (an interrupted node's own --remove, which ends the node's
      # processes, then renames the folder away before it deletes it) is waited for, up to
      # a minute.
      "bash '${self.input.node_dir}/.enrol/bootstrap-node.sh' --remove --node-dir '${self.input.node_dir}' || bash -c 'for _ in $(seq 600); do [ -e \"$1\" ] || exit 0; sleep 0.1; done; exit 1' _ '${self.input.node_dir}'",
    ]
    connection {
      type        = "ssh"
      host        = self.input.host
      port        = self.input.port
      user        = self.input.user
      private_key = file(self.input.key_path)
      host_key    = self.input.host_key
      agent       = false
      timeout     = "30s"
      # Beside the node's folder (which this removes); `down` removes it and the empty
      # folders above afterwards (the target's after_down).
      script_path = "${dirname(self.input.node_dir)}/.${self.input.name}-remove.sh"
    }
  }
}
