locals {
  # Node i lives on base_address + i: the offset arithmetic goes through cidrhost over /8.
  base_offset = (
    tonumber(split(".", var.base_address)[1]) * 65536 +
    tonumber(split(".", var.base_address)[2]) * 256 +
    tonumber(split(".", var.base_address)[3])
  )
  nodes = {
    for i in range(var.node_count) : "node-${i}" => {
      index       = i
      address     = cidrhost("127.0.0.0/8", local.base_offset + i)
      dir         = "${var.node_root}/node-${i}"
      instance_id = "local-${var.cluster_name}-${i}"
    }
  }
  bootstrap_script = abspath(var.bootstrap_script)
}

# One node = one directory with its own virtual environment and loopback address.
# `input` is what the outputs read; `triggers_replace` lists everything the bootstrap
# depends on, so a changed wheel or package list replaces the node while an unchanged
# spec plans no changes.
resource "terraform_data" "node" {
  for_each = local.nodes

  input = merge(each.value, { name = each.key })

  triggers_replace = {
    python                = var.python
    inherit_site_packages = var.inherit_site_packages
    wheel_sha256          = var.wheel_sha256
    python_packages       = join(" ", var.python_packages)
    bootstrap_sha256      = filesha256(local.bootstrap_script)
    bootstrap_path        = local.bootstrap_script
  }

  # Paths travel in the environment so that spaces in them survive the shell; the
  # package requirements are single-quoted (the spec forbids quotes and spaces in them).
  provisioner "local-exec" {
    command = join(" ", concat(
      ["exec bash \"$BOOTSTRAP\" --node-dir \"$NODE_DIR\" --python \"$NODE_PYTHON\" --wheel \"$WHEEL\""],
      var.inherit_site_packages ? ["--inherit-site-packages"] : [],
      [for p in var.python_packages : "--package '${p}'"],
      # uv and its cache: not triggers (how a node is installed does not change what it is).
      ["--uv \"$NODE_UV\""],
      # The node's stand-in for EC2's metadata service (Spot notices, `skyinfra drill`).
      ["--imds-standin \"$NODE_ADDRESS\""],
      var.uv_cache_dir == "" ? [] : ["--cache-dir \"$UV_CACHE\""],
    ))
    environment = {
      BOOTSTRAP    = local.bootstrap_script
      NODE_DIR     = each.value.dir
      NODE_PYTHON  = var.python
      WHEEL        = var.wheel_path
      NODE_UV      = var.uv
      NODE_ADDRESS = each.value.address
      UV_CACHE     = var.uv_cache_dir
    }
  }

  # Destroy-time provisioners may only read `self`. The script ends the processes the
  # transport recorded in the node's pids/ folder, then removes the directory, but only
  # one that the bootstrap marked as a node.
  provisioner "local-exec" {
    when    = destroy
    command = "bash \"$BOOTSTRAP\" --remove --node-dir \"$NODE_DIR\""
    environment = {
      BOOTSTRAP = self.triggers_replace.bootstrap_path
      NODE_DIR  = self.input.dir
    }
  }
}
