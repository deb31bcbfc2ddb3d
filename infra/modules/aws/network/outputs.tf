output "vpc_id" {
  description = "ID of the VPC the cluster lives in."
  value       = local.create ? aws_vpc.this[0].id : var.existing_vpc_id
}

output "subnet_id" {
  description = "ID of the subnet the nodes are placed in (known once the internet route is in place)."
  value       = local.create ? aws_subnet.this[0].id : data.aws_subnet.existing[0].id

  # An Elastic IP can only be associated in a VPC with an internet gateway (the aws_eip
  # docs: "EIP may require IGW to exist prior to association"), and a node's cloud-init
  # needs the route to reach PyPI: whatever uses the subnet waits for both.
  depends_on = [aws_internet_gateway.this, aws_route.internet, aws_route_table_association.this]
}

output "subnet_cidr_block" {
  description = "IPv4 CIDR block of the subnet; the nodes' fixed private addresses are taken from it."
  value       = local.create ? aws_subnet.this[0].cidr_block : data.aws_subnet.existing[0].cidr_block
}

output "availability_zone" {
  description = "Availability zone of the subnet."
  value       = local.create ? aws_subnet.this[0].availability_zone : data.aws_subnet.existing[0].availability_zone
}
