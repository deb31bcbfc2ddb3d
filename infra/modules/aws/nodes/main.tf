locals {
  # Node names are the stable keys of every per-node resource and of the topology output.
  nodes = {
    for index in range(var.node_count) : "node-${index}" => {
      index      = index
      private_ip = cidrhost(var.subnet_cidr_block, var.private_ip_host_offset + index)
    }
  }

  efa_enabled = var.efa_interface_count > 0

  # One EFA interface per network card, keyed "<node>/<card>". Card 0 (device index 0) is
  # an EFA with ENA: it carries the node's fixed address and its Elastic IP. The other cards
  # get EFA-only interfaces (device index 1): no IP address, so a p5 node takes one subnet
  # address instead of 32, nothing is auto-assigned that could take another node's planned
  # address, and the node has one IP interface for sockets (NCCL's bootstrap, SSH). AWS
  # recommends EFA-only interfaces beyond the primary for this ("save IP addresses and avoid
  # potential Linux IP issues"), and an EFA-only interface cannot be the primary:
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html
  # (That page's current text puts EFA-only interfaces of the other cards at device index 0;
  # its earlier P5 example, and this module so far, used 1. Unverified on hardware.)
  efa_interfaces = merge([
    for node, attrs in local.nodes : {
      for card in range(var.efa_interface_count) : "${node}/${card}" => {
        node           = node
        card           = card
        device_index   = card == 0 ? 0 : 1
        interface_type = card == 0 ? "efa" : "efa-only"
        private_ip     = card == 0 ? attrs.private_ip : null
      }
    }
  ]...)

  # AWS gives no public address to an instance launched with existing interfaces (ours are
  # created first, to pin card 0's address) nor with several interfaces: "The public IP
  # address can only be assigned to a network interface for eth0, and can only be assigned
  # to a new network interface, not an existing one. You cannot specify more than one
  # network interface in the request."
  # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceNetworkInterfaceSpecification.html
  # An EFA node reachable from outside gets an Elastic IP on its card-0 interface instead.
  public_eips = local.efa_enabled && var.associate_public_ip_address ? local.nodes : {}

  # Fixed precedence: caller's tags < instance tags < the identity tags set here.
  base_tags = merge(var.tags, { "skyinfra:cluster" = var.name })
}

################################################################################
# Key pair, instance profile, placement group
################################################################################

resource "aws_key_pair" "this" {
  key_name   = "${var.name}-key"
  public_key = var.ssh_public_key

  tags = merge(local.base_tags, { Name = "${var.name}-key" })
}

data "aws_iam_policy_document" "assume_role" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  name                  = "${var.name}-node"
  description           = "skyinfra cluster ${var.name}: node role (no permissions unless policies are given)"
  assume_role_policy    = data.aws_iam_policy_document.assume_role.json
  force_detach_policies = true

  tags = merge(local.base_tags, { Name = "${var.name}-node" })
}

resource "aws_iam_role_policy_attachment" "this" {
  for_each = toset(var.instance_profile_policy_arns)

  role       = aws_iam_role.this.name
  policy_arn = each.value
}

data "aws_partition" "current" {}

# Read access to the staged runtime wheel only: nodes fetch it with the role's credentials
# instead of a presigned URL, which would put the operator's access key id (and session token)
# into the user data, the tfvars and the state.
data "aws_iam_policy_document" "staged_read" {
  count = var.staged_read == null ? 0 : 1

  statement {
    actions   = ["s3:GetObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.staged_read.bucket}/${var.staged_read.prefix}*"]
  }
}

resource "aws_iam_role_policy" "staged_read" {
  count = var.staged_read == null ? 0 : 1

  name   = "${var.name}-staged-read"
  role   = aws_iam_role.this.id
  policy = data.aws_iam_policy_document.staged_read[0].json
}

# Checkpoints (issue 25): read and write under one S3 prefix, nothing else of the bucket. The
# nodes list their prefix to restore a checkpoint set (ListBucket, with the prefix as a
# condition) and put, get and delete the objects under it (skyinfra_runtime/ckptsync.py).
data "aws_iam_policy_document" "checkpoints" {
  count = var.checkpoints == null ? 0 : 1

  statement {
    sid       = "ListTheCheckpointPrefix"
    actions   = ["s3:ListBucket"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.checkpoints.bucket}"]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.checkpoints.prefix}/*"]
    }
  }

  statement {
    sid       = "ReadWriteTheCheckpointPrefix"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.checkpoints.bucket}/${var.checkpoints.prefix}/*"]
  }
}

resource "aws_iam_role_policy" "checkpoints" {
  count = var.checkpoints == null ? 0 : 1

  name   = "${var.name}-checkpoints"
  role   = aws_iam_role.this.id
  policy = data.aws_iam_policy_document.checkpoints[0].json
}

resource "aws_iam_instance_profile" "this" {
  name = "${var.name}-node"
  role = aws_iam_role.this.name

  tags = merge(local.base_tags, { Name = "${var.name}-node" })
}

resource "aws_placement_group" "this" {
  count = var.placement_group_enabled ? 1 : 0

  name     = "${var.name}-cluster"
  strategy = "cluster"

  tags = merge(local.base_tags, { Name = "${var.name}-cluster" })
}

################################################################################
# EFA interfaces (only when efa_interface_count > 0)
################################################################################

resource "aws_network_interface" "efa" {
  for_each = local.efa_interfaces

  subnet_id       = var.subnet_id
  security_groups = var.security_group_ids
  interface_type  = each.value.interface_type
  private_ips     = each.value.private_ip == null ? null : [each.value.private_ip]
  description     = "skyinfra ${var.name} ${each.value.node} ${each.value.interface_type} card ${each.value.card}"

  tags = merge(local.base_tags, { Name = "${var.name}-${each.value.node}-efa${each.value.card}" })
}

# The public address of an EFA node (see public_eips). An EIP can go on an EFA-with-ENA
# interface, never on an EFA-only one:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html
# Each counts against the region's "EC2-VPC Elastic IPs" quota (5 by default), which the
# preflight checks (skyinfra/targets/aws/preflight.py).
resource "aws_eip" "node" {
  # checkov:skip=CKV2_AWS_19:Each EIP is attached to its node through the node's card-0 EFA interface (network_interface), which the instance is launched with; checkov only recognises an instance argument or an aws_eip_association.
  for_each = local.public_eips

  domain                    = "vpc"
  network_interface         = aws_network_interface.efa["${each.key}/0"].id
  associate_with_private_ip = each.value.private_ip

  tags = merge(local.base_tags, { Name = "${var.name}-${each.key}", "skyinfra:node" = each.key })
}

################################################################################
# Nodes
################################################################################

resource "aws_instance" "this" {
  # checkov:skip=CKV_AWS_126:Detailed (1-minute) monitoring is billed per instance and has no use for short-lived training nodes; detailed_monitoring = true turns it on.
  for_each = local.nodes

  ami                  = var.ami_id
  instance_type        = var.instance_type
  key_name             = aws_key_pair.this.key_name
  iam_instance_profile = aws_iam_instance_profile.this.name
  placement_group      = var.placement_group_enabled ? aws_placement_group.this[0].id : null

  # Without EFA the instance's own primary interface carries the fixed address; with EFA the
  # card-0 interface does, and AWS then refuses subnet, groups and public-address settings on
  # the instance itself (they belong to the interfaces).
  subnet_id                   = local.efa_enabled ? null : var.subnet_id
  private_ip                  = local.efa_enabled ? null : each.value.private_ip
  vpc_security_group_ids      = local.efa_enabled ? null : var.security_group_ids
  associate_public_ip_address = local.efa_enabled ? null : var.associate_public_ip_address

  dynamic "network_interface" {
    for_each = { for key, eni in local.efa_interfaces : key => eni if eni.node == each.key }
    content {
      network_interface_id = aws_network_interface.efa[network_interface.key].id
      device_index         = network_interface.value.device_index
      network_card_index   = network_interface.value.card
    }
  }

  # An idle node ends itself with `shutdown`; terminate rather than stop so it stops costing.
  instance_initiated_shutdown_behavior = "terminate"
  monitoring                           = var.detailed_monitoring
  ebs_optimized                        = true

  user_data        = try(var.user_data[each.key].text, null)
  user_data_base64 = try(var.user_data[each.key].base64, null)

  lifecycle {
    # User data only matters at first boot (cloud-init runs it once per instance); changing it
    # later would stop and start a running node for nothing. It changes when the runtime wheel
    # does (a new sha256 and key): a node created later (after an idle shutdown ended it)
    # gets the current document.
    ignore_changes = [user_data, user_data_base64]
  }

  # Capacity (issue 13): launch into the reservation; a Capacity Block also needs the
  # capacity-block market type. https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html
  dynamic "capacity_reservation_specification" {
    for_each = var.capacity_reservation == null ? [] : [var.capacity_reservation.id]
    content {
      capacity_reservation_target {
        capacity_reservation_id = capacity_reservation_specification.value
      }
    }
  }

  # The market: a Capacity Block's own type, else Spot for the nodes node_markets names so
  # (On-Demand has no block). Spot requests are one-time with interruption behaviour
  # terminate: RunInstances supports persistent requests only with stop or hibernate, which
  # would leave a stopped node (and its disk) waiting for EC2 to restart it outside
  # Terraform; a terminated node stops costing, and skyinfra replaces it like any lost node.
  # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SpotMarketOptions.html
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/interruption-behavior.html
  # Without max_price the cap is the On-Demand price; with one, AWS warns that Spot nodes
  # are interrupted more often when the Spot price passes it.
  dynamic "instance_market_options" {
    for_each = try(var.capacity_reservation.capacity_block, false) ? ["capacity-block"] : lookup(var.node_markets, each.key, "on-demand") == "spot" ? ["spot"] : []
    content {
      market_type = instance_market_options.value

      dynamic "spot_options" {
        for_each = instance_market_options.value == "spot" ? [var.spot_max_price] : []
        content {
          spot_instance_type             = "one-time"
          instance_interruption_behavior = "terminate"
          max_price                      = spot_options.value == null ? null : format("%.4f", spot_options.value)
        }
      }
    }
  }

  # IMDSv2 only; hop limit 1 keeps the instance credentials away from containers on the node.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size_gb
    encrypted             = true
    delete_on_termination = true
  }

  tags = merge(local.base_tags, var.instance_tags, {
    Name             = "${var.name}-${each.key}"
    "skyinfra:node"  = each.key
    "skyinfra:index" = tostring(each.value.index)
  })
  volume_tags = merge(local.base_tags, { Name = "${var.name}-${each.key}-root" })
}
