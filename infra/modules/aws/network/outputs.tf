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
  depends_on = [
    aws_internet_gateway.this,
    aws_route.internet,
    aws_route.return,
    aws_route.nat,
    aws_route_table_association.this,
    aws_vpc_endpoint.s3,
  ]
}

output "subnet_cidr_block" {
  description = "IPv4 CIDR block of the subnet; the nodes' fixed private addresses are taken from it."
  value       = local.create ? aws_subnet.this[0].cidr_block : data.aws_subnet.existing[0].cidr_block
}

output "availability_zone" {
  description = "Availability zone of the subnet."
  value       = local.create ? aws_subnet.this[0].availability_zone : data.aws_subnet.existing[0].availability_zone
}

output "route_table_id" {
  description = "ID of the nodes' route table (null with an existing subnet)."
  value       = try(aws_route_table.this[0].id, null)
}

output "public_subnet_id" {
  description = "ID of the public subnet of a private network (the bastion's), or null."
  value       = try(aws_subnet.public[0].id, null)

  depends_on = [aws_route.public_internet, aws_route_table_association.public]
}

output "s3_prefix_list_id" {
  description = "Prefix list of the S3 gateway endpoint (private subnet), or null: the nodes' egress to S3."
  value       = try(aws_vpc_endpoint.s3[0].prefix_list_id, null)
}

output "nat_gateway_id" {
  description = "ID of the NAT gateway (private subnet with nat_gateway), or null."
  value       = try(aws_nat_gateway.this[0].id, null)
}
