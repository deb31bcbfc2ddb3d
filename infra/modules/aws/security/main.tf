resource "aws_security_group" "this" {
  # checkov:skip=CKV2_AWS_5:The group is attached by the nodes module (instances and EFA interfaces), which checkov cannot follow across module outputs.
  name        = "${var.name}-nodes"
  description = "skyinfra cluster ${var.name}: all traffic between members, SSH from the given CIDRs"
  vpc_id      = var.vpc_id

  tags = merge(var.tags, { Name = "${var.name}-nodes" })

  lifecycle {
    create_before_destroy = true
  }
}

################################################################################
# Traffic between the cluster's members
#
# EFA requires the security group to allow all inbound AND all outbound traffic to and from
# the security group itself; NCCL/libfabric silently fail without the egress half. See
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security
# ("Prepare an EFA-enabled security group").
################################################################################

resource "aws_vpc_security_group_ingress_rule" "self" {
  security_group_id            = aws_security_group.this.id
  description                  = "All traffic from cluster members (EFA, NCCL, JAX/torch coordination)"
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.this.id

  tags = merge(var.tags, { Name = "${var.name}-self-in" })
}

resource "aws_vpc_security_group_egress_rule" "self" {
  security_group_id            = aws_security_group.this.id
  description                  = "All traffic to cluster members (EFA needs the egress half too)"
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.this.id

  tags = merge(var.tags, { Name = "${var.name}-self-out" })
}

################################################################################
# SSH from the operator, egress to the outside
################################################################################

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each = var.enable_ssh ? toset(var.ssh_ingress_cidrs) : toset([])

  security_group_id = aws_security_group.this.id
  description       = "SSH from ${each.value}"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = each.value

  tags = merge(var.tags, { Name = "${var.name}-ssh" })
}

resource "aws_vpc_security_group_egress_rule" "outbound" {
  for_each = toset(var.egress_cidrs)

  security_group_id = aws_security_group.this.id
  description       = "Outbound to ${each.value} (runtime wheel from S3, packages from PyPI)"
  ip_protocol       = "-1"
  cidr_ipv4         = each.value

  tags = merge(var.tags, { Name = "${var.name}-out" })
}

################################################################################
# Private network: SSH from the bastion's group only, egress to S3 through its endpoint
#
# count, not for_each: the ids are known only after apply (the bastion's group, the
# endpoint's prefix list), and for_each keys must be known at plan time.
################################################################################

resource "aws_vpc_security_group_ingress_rule" "ssh_from_group" {
  # checkov:skip=CKV_AWS_24:The rule admits SSH from the bastion's security group (referenced_security_group_id), never from a CIDR block; checkov cannot resolve the group reference and flags it.
  count = length(var.ssh_source_security_group_ids)

  security_group_id            = aws_security_group.this.id
  description                  = "SSH from the bastion's security group"
  ip_protocol                  = "tcp"
  from_port                    = 22
  to_port                      = 22
  referenced_security_group_id = var.ssh_source_security_group_ids[count.index]

  tags = merge(var.tags, { Name = "${var.name}-ssh-from-bastion" })
}

resource "aws_vpc_security_group_egress_rule" "prefix_list" {
  count = length(var.egress_prefix_list_ids)

  security_group_id = aws_security_group.this.id
  description       = "HTTPS to the S3 gateway endpoint (runtime wheel, checkpoints)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  prefix_list_id    = var.egress_prefix_list_ids[count.index]

  tags = merge(var.tags, { Name = "${var.name}-out-s3" })
}
