output "nodes" {
  description = "Every node keyed by name: index, instance_id, private_ip, public_ip (the Elastic IP of an EFA node; null without one), availability_zone, efa_interface_ids."
  value = {
    for node, attrs in local.nodes : node => {
      index             = attrs.index
      instance_id       = aws_instance.this[node].id
      private_ip        = aws_instance.this[node].private_ip
      public_ip         = try(aws_eip.node[node].public_ip, aws_instance.this[node].public_ip == "" ? null : aws_instance.this[node].public_ip)
      availability_zone = aws_instance.this[node].availability_zone
      efa_interface_ids = [for key, eni in aws_network_interface.efa : eni.id if local.efa_interfaces[key].node == node]
    }
  }
}

output "placement_group_name" {
  description = "Name of the cluster placement group, or null when off."
  value       = try(aws_placement_group.this[0].name, null)
}

output "instance_profile_name" {
  description = "Name of the nodes' instance profile."
  value       = aws_iam_instance_profile.this.name
}

output "head_instance_profile_name" {
  description = "Name of node-0's own instance profile with head_recovery (aws.recover), or null when off (node-0 then uses instance_profile_name)."
  value       = try(aws_iam_instance_profile.head[0].name, null)
}

output "key_name" {
  description = "Name of the cluster's key pair (a bastion is reached with the same key)."
  value       = aws_key_pair.this.key_name
}
