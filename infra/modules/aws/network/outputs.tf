output "vpc_id" {
  description = "ID of the VPC the cluster lives in."
  value       = local.create ? aws_vpc.this[0].id : var.existing_vpc_id
}

output "subnet_id" {
  description = "ID of the subnet the nodes are placed in."
  value       = local.create ? aws_subnet.this[0].id : data.aws_subnet.existing[0].id
}

output "subnet_cidr_block" {
  description = "IPv4 CIDR block of the subnet; the nodes' fixed private addresses are taken from it."
  value       = local.create ? aws_subnet.this[0].cidr_block : data.aws_subnet.existing[0].cidr_block
}

output "availability_zone" {
  description = "Availability zone of the subnet."
  value       = local.create ? aws_subnet.this[0].availability_zone : data.aws_subnet.existing[0].availability_zone
}
