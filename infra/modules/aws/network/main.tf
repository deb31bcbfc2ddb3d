locals {
  create = var.existing_subnet_id == null

  # A private nodes' subnet (private_subnet): no public addresses, no default route to the
  # internet (unless nat_gateway), S3 through a gateway endpoint.
  private = local.create && var.private_subnet
  public  = local.private && var.public_subnet_cidr_block != null
}

################################################################################
# New VPC, the nodes' subnet, internet gateway and (for a public subnet) default route
################################################################################

resource "aws_vpc" "this" {
  # checkov:skip=CKV2_AWS_11:Flow logs need a log group and an IAM role per cluster; short-lived training clusters leave them off (a user can add them to the VPC).
  count = local.create ? 1 : 0

  cidr_block           = var.vpc_cidr_block
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = merge(var.tags, { Name = "${var.name}-vpc" })
}

resource "aws_subnet" "this" {
  # checkov:skip=CKV_AWS_130:The operator reaches single-card nodes over SSH on their public address (restricted to ssh_ingress_cidrs); private_subnet = true (or map_public_ip_on_launch = false) keeps nodes private.
  count = local.create ? 1 : 0

  vpc_id                  = aws_vpc.this[0].id
  cidr_block              = var.subnet_cidr_block
  availability_zone       = var.availability_zone
  map_public_ip_on_launch = local.private ? false : var.map_public_ip_on_launch

  tags = merge(var.tags, { Name = "${var.name}-subnet" })
}

resource "aws_internet_gateway" "this" {
  count = local.create ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = "${var.name}-igw" })
}

resource "aws_route_table" "this" {
  count = local.create ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = "${var.name}-rt" })
}

resource "aws_route" "internet" {
  count = local.create && !local.private ? 1 : 0

  route_table_id         = aws_route_table.this[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "this" {
  count = local.create ? 1 : 0

  subnet_id      = aws_subnet.this[0].id
  route_table_id = aws_route_table.this[0].id
}

################################################################################
# Existing VPC and subnet
################################################################################

data "aws_subnet" "existing" {
  count = local.create ? 0 : 1

  id     = var.existing_subnet_id
  vpc_id = var.existing_vpc_id
}

# Adopt the new VPC's default security group and strip its rules, so nothing launched into
# the VPC without an explicit group gets the default allow-all-between-members behaviour.
resource "aws_default_security_group" "this" {
  count = local.create ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = "${var.name}-default-closed" })
}

################################################################################
# Private nodes' subnet (private_subnet = true)
#
# The nodes' route table has the VPC's local route, the S3 gateway endpoint (free: S3 traffic
# stays on AWS's network, no NAT needed for the wheel and checkpoints) and no default route,
# unless nat_gateway = true. return_route_cidrs route only the operator's blocks to the
# internet gateway, so that a node with a public address (node 0 as the way in) can answer
# them; a node without one cannot use the gateway at all.
# https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html
################################################################################

data "aws_region" "current" {}

resource "aws_vpc_endpoint" "s3" {
  count = local.private ? 1 : 0

  vpc_id            = aws_vpc.this[0].id
  service_name      = "com.amazonaws.${data.aws_region.current.name}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.this[0].id]

  tags = merge(var.tags, { Name = "${var.name}-s3" })
}

resource "aws_route" "return" {
  count = local.private ? length(var.return_route_cidrs) : 0

  route_table_id         = aws_route_table.this[0].id
  destination_cidr_block = var.return_route_cidrs[count.index]
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route" "nat" {
  count = local.private && var.nat_gateway ? 1 : 0

  route_table_id         = aws_route_table.this[0].id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[0].id
}

################################################################################
# Public subnet of a private network: the bastion and the NAT gateway, nothing else
################################################################################

resource "aws_subnet" "public" {
  # checkov:skip=CKV_AWS_130:The public subnet of a private network holds only the bastion (SSH from ssh_ingress_cidrs) and the NAT gateway; the nodes are in the private subnet.
  count = local.public ? 1 : 0

  vpc_id                  = aws_vpc.this[0].id
  cidr_block              = var.public_subnet_cidr_block
  availability_zone       = var.availability_zone
  map_public_ip_on_launch = true

  tags = merge(var.tags, { Name = "${var.name}-public" })
}

resource "aws_route_table" "public" {
  count = local.public ? 1 : 0

  vpc_id = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = "${var.name}-public-rt" })
}

resource "aws_route" "public_internet" {
  count = local.public ? 1 : 0

  route_table_id         = aws_route_table.public[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "public" {
  count = local.public ? 1 : 0

  subnet_id      = aws_subnet.public[0].id
  route_table_id = aws_route_table.public[0].id
}

# About $0.045 an hour plus $0.045 per GB processed (us-east-1): only when asked for.
resource "aws_eip" "nat" {
  # checkov:skip=CKV2_AWS_19:The Elastic IP belongs to the NAT gateway (allocation_id), not to an instance.
  count = local.private && var.nat_gateway ? 1 : 0

  domain = "vpc"

  tags = merge(var.tags, { Name = "${var.name}-nat" })
}

resource "aws_nat_gateway" "this" {
  count = local.private && var.nat_gateway ? 1 : 0

  allocation_id = aws_eip.nat[0].id
  subnet_id     = aws_subnet.public[0].id

  tags = merge(var.tags, { Name = "${var.name}-nat" })

  depends_on = [aws_internet_gateway.this]
}

################################################################################
# Interface endpoints (Session Manager: ssm, ssmmessages, ec2messages) in the nodes' subnet
# https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-create-vpc.html
################################################################################

resource "aws_security_group" "endpoints" {
  count = local.private && length(var.interface_endpoints) > 0 ? 1 : 0

  name        = "${var.name}-endpoints"
  description = "skyinfra cluster ${var.name}: HTTPS from the VPC to its interface endpoints"
  vpc_id      = aws_vpc.this[0].id

  tags = merge(var.tags, { Name = "${var.name}-endpoints" })
}

resource "aws_vpc_security_group_ingress_rule" "endpoints" {
  count = local.private && length(var.interface_endpoints) > 0 ? 1 : 0

  security_group_id = aws_security_group.endpoints[0].id
  description       = "HTTPS from the VPC"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = var.vpc_cidr_block

  tags = merge(var.tags, { Name = "${var.name}-endpoints-in" })
}

resource "aws_vpc_endpoint" "interface" {
  for_each = local.private ? toset(var.interface_endpoints) : toset([])

  vpc_id              = aws_vpc.this[0].id
  service_name        = "com.amazonaws.${data.aws_region.current.name}.${each.value}"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = [aws_subnet.this[0].id]
  security_group_ids  = [aws_security_group.endpoints[0].id]
  private_dns_enabled = true

  tags = merge(var.tags, { Name = "${var.name}-${each.value}" })
}
