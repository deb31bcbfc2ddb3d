locals {
  create = var.existing_subnet_id == null
}

################################################################################
# New VPC, one public subnet, internet gateway and default route
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
  # checkov:skip=CKV_AWS_130:The operator reaches single-card nodes over SSH on their public address (restricted to ssh_ingress_cidrs); set map_public_ip_on_launch = false for private nodes.
  count = local.create ? 1 : 0

  vpc_id                  = aws_vpc.this[0].id
  cidr_block              = var.subnet_cidr_block
  availability_zone       = var.availability_zone
  map_public_ip_on_launch = var.map_public_ip_on_launch

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
  count = local.create ? 1 : 0

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
