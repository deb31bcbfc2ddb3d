output "nodes" {
  description = "Every node keyed by name: index, addresses, instance id, accelerator, directory."
  value = {
    for name, node in terraform_data.node : name => {
      index       = node.output.index
      name        = name
      private_ip  = node.output.private_address
      public_ip   = node.output.host
      instance_id = node.output.instance_id
      # From the variable, not the resource: known at plan time, so plan.md shows the GPUs.
      accelerator = var.hosts[name].gpus > 0 ? { type = var.hosts[name].gpu_type, count = var.hosts[name].gpus } : null
      node_dir    = node.output.node_dir
    }
  }
}

output "head_addr" {
  description = "Address of node 0, where the coordination services listen."
  value       = var.hosts["node-0"].private_address
}

output "head_port" {
  description = "Base coordination port on the head node."
  value       = var.head_port
}
