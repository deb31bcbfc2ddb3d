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
  public_eips = local.efa_enabled ? { for node, attrs in local.nodes : node => attrs if local.public[node] } : {}

  # Which nodes get a public address: every node by associate_public_ip_address, or only
  # those public_nodes names (a private network's way in, node 0, when it has no bastion).
  public = {
    for node in keys(local.nodes) : node => var.public_nodes == null ? var.associate_public_ip_address : contains(local.public_names, node)
  }
  public_names = var.public_nodes == null ? [] : var.public_nodes

  # Fixed precedence: caller's tags < instance tags < the identity tags set here.
  base_tags = merge(var.tags, { "skyinfra:cluster" = var.name })

  # Unattended recovery (aws.recover): node-0 gets the head's role (see "The head's role").
  head_recovery = var.head_recovery != null
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
    # The wheelhouse (issue 46) is shared by the account's clusters: read-only, its prefix only.
    actions = ["s3:GetObject"]
    resources = compact([
      "arn:${data.aws_partition.current.partition}:s3:::${var.staged_read.bucket}/${var.staged_read.prefix}*",
      var.staged_read.wheelhouse == null ? "" : "arn:${data.aws_partition.current.partition}:s3:::${var.staged_read.bucket}/${var.staged_read.wheelhouse}*",
    ])
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

################################################################################
# The head's role (unattended recovery, aws.recover; only with head_recovery)
#
# node-0 runs Terraform on the cluster's shared S3 state to re-create workers that were lost
# or interrupted (Spot). It gets a role of its own: everything the node role has (the same
# managed policies and the same policy documents, not copies) plus the inline policy
# "<name>-recover" below. The head only re-creates what is gone: it may launch instances
# tagged as this cluster's, read and write this cluster's state and lock object, and read
# what `terraform plan` refreshes. It has no ec2:TerminateInstances, no Delete* (beyond
# releasing its own lock object), no IAM write, and no access to other buckets or clusters.
################################################################################

data "aws_region" "current" {
  count = local.head_recovery ? 1 : 0
}

data "aws_caller_identity" "current" {
  count = local.head_recovery ? 1 : 0
}

locals {
  # ARN parts of the cluster's EC2 resources (region and account of the provider).
  ec2_arn = local.head_recovery ? "arn:${data.aws_partition.current.partition}:ec2:${data.aws_region.current[0].name}:${data.aws_caller_identity.current[0].account_id}" : ""
  s3_arn  = "arn:${data.aws_partition.current.partition}:s3:::"

  # The folder the state object lies in (<prefix>/<cluster>): the only keys the head may list.
  head_state_folder = local.head_recovery ? regex("^(.*)/[^/]+$", var.head_recovery.state_key)[0] : ""

  # What a launch uses besides the new instance and its volume, each by its exact ARN: the
  # cluster's subnet and security groups (skyinfra's own or the user's aws.subnet_id), key
  # pair, placement group and capacity reservation; the Spot request a Spot node's launch
  # creates (RunInstances authorizes it as a resource of its own; it carries no tag).
  head_launch_resources = local.head_recovery ? concat(
    ["${local.ec2_arn}:subnet/${var.subnet_id}"],
    [for id in var.security_group_ids : "${local.ec2_arn}:security-group/${id}"],
    [aws_key_pair.this.arn],
    var.placement_group_enabled ? [aws_placement_group.this[0].arn] : [],
    var.capacity_reservation == null ? [] : ["${local.ec2_arn}:capacity-reservation/${var.capacity_reservation.id}"],
    contains(values(var.node_markets), "spot") ? ["${local.ec2_arn}:spot-instances-request/*"] : [],
  ) : []
}

data "aws_iam_policy_document" "head_recover" {
  # checkov:skip=CKV_AWS_356:Only the DescribeForTheRefresh statement has Resource "*": `terraform plan` refreshes every resource of the cluster with EC2 Describe calls, which take no resource ARNs (and a read cannot change anything); every other statement is scoped to the cluster.
  count = local.head_recovery ? 1 : 0

  # Terraform's S3 backend: the state object and its lock object (use_lockfile: a conditional
  # PutObject takes the lock, GetObject reads its holder, DeleteObject releases it).
  # https://developer.hashicorp.com/terraform/language/backend/s3#permissions-required
  # Listing is limited to the cluster's folder; Terraform also lists the default workspace
  # prefix (env:/) and, refused, carries on with the default workspace.
  statement {
    sid       = "ListTheClusterStateFolder"
    actions   = ["s3:ListBucket"]
    resources = ["${local.s3_arn}${var.head_recovery.bucket}"]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.head_state_folder}/*"]
    }
  }

  statement {
    sid       = "ReadWriteTheClusterState"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["${local.s3_arn}${var.head_recovery.bucket}/${var.head_recovery.state_key}"]
  }

  statement {
    sid       = "TakeAndReleaseTheStateLock"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.s3_arn}${var.head_recovery.bucket}/${var.head_recovery.lock_key}"]
  }

  # `terraform plan` refreshes every resource of the cluster (VPC, subnet, security group and
  # its rules, key pair, addresses, interfaces, instances). EC2's Describe* actions support no
  # resource-level permissions, so they take "*" ("Actions, resources, and condition keys for
  # Amazon EC2": no resource types for the Describe actions):
  # https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html
  statement {
    sid       = "DescribeForTheRefresh"
    actions   = ["ec2:Describe*"]
    resources = ["*"]
  }

  # A new node publishes its SSH host keys on its console; the head reads them from there,
  # on this cluster's instances only.
  statement {
    sid       = "ReadTheClusterConsoles"
    actions   = ["ec2:GetConsoleOutput"]
    resources = ["${local.ec2_arn}:instance/*"]

    condition {
      test     = "StringEquals"
      variable = "ec2:ResourceTag/skyinfra:cluster"
      values   = [var.name]
    }
  }

  # RunInstances authorizes every resource a launch uses or creates (resource types image,
  # instance, network-interface, security-group, subnet, volume required; key-pair,
  # placement-group, capacity-reservation, snapshot, spot-instances-request as used):
  # https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html#amazonec2-RunInstances
  # The new instance and its root volume only when the request tags them as this cluster's
  # (aws:RequestTag; the module tags both at launch, `tags` and `volume_tags`):
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ExamplePolicies_EC2.html#iam-example-runinstances
  statement {
    sid     = "LaunchOnlyInstancesTaggedForTheCluster"
    actions = ["ec2:RunInstances"]
    resources = [
      "${local.ec2_arn}:instance/*",
      "${local.ec2_arn}:volume/*",
    ]

    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/skyinfra:cluster"
      values   = [var.name]
    }
  }

  # The network interfaces of a launch: the provider tags none at launch (only the instance
  # and its volumes), so aws:RequestTag cannot hold for them; they are limited to the
  # cluster's subnet (ec2:Subnet), and an existing interface (an EFA node's, kept across its
  # instance) must carry the cluster's tag where it carries one at all.
  statement {
    sid       = "LaunchInterfacesInTheClusterSubnet"
    actions   = ["ec2:RunInstances"]
    resources = ["${local.ec2_arn}:network-interface/*"]

    condition {
      test     = "StringEquals"
      variable = "ec2:Subnet"
      values   = ["${local.ec2_arn}:subnet/${var.subnet_id}"]
    }

    condition {
      test     = "StringEqualsIfExists"
      variable = "ec2:ResourceTag/skyinfra:cluster"
      values   = [var.name]
    }
  }

  statement {
    sid       = "LaunchWithTheClusterNetworkAndKey"
    actions   = ["ec2:RunInstances"]
    resources = local.head_launch_resources
  }

  # Any image of the region (the cluster's AMI is pinned in the tfvars, and a new one would
  # replace every node, which the head cannot do), and the snapshots behind an image's volumes.
  statement {
    sid     = "LaunchFromImagesOfTheRegion"
    actions = ["ec2:RunInstances"]
    resources = [
      "arn:${data.aws_partition.current.partition}:ec2:${data.aws_region.current[0].name}::image/*",
      "arn:${data.aws_partition.current.partition}:ec2:${data.aws_region.current[0].name}::snapshot/*",
    ]
  }

  # Tags only as part of the launch, never on an existing resource:
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html
  statement {
    sid     = "TagOnlyAtLaunch"
    actions = ["ec2:CreateTags"]
    resources = [
      "${local.ec2_arn}:instance/*",
      "${local.ec2_arn}:volume/*",
      "${local.ec2_arn}:network-interface/*",
    ]

    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["RunInstances"]
    }
  }

  # A new node launches with the node profile: the head may hand EC2 the node role, no other.
  statement {
    sid       = "PassTheNodeRoleToEC2"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.this.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ec2.amazonaws.com"]
    }
  }

  # What the provider's refresh of the cluster's roles, their policies and attachments and
  # the instance profiles calls (aws_iam_role: GetRole, ListRolePolicies, GetRolePolicy,
  # ListAttachedRolePolicies; aws_iam_role_policy: GetRolePolicy; aws_iam_role_policy_attachment:
  # ListAttachedRolePolicies; aws_iam_instance_profile: GetInstanceProfile), on the cluster's
  # own roles and profiles only. Nothing that writes.
  statement {
    sid = "ReadTheClusterRoles"
    actions = [
      "iam:GetRole",
      "iam:GetRolePolicy",
      "iam:ListRolePolicies",
      "iam:ListAttachedRolePolicies",
    ]
    resources = [aws_iam_role.this.arn, aws_iam_role.head[0].arn]
  }

  statement {
    sid       = "ReadTheClusterInstanceProfiles"
    actions   = ["iam:GetInstanceProfile"]
    resources = [aws_iam_instance_profile.this.arn, aws_iam_instance_profile.head[0].arn]
  }
}

resource "aws_iam_role" "head" {
  count = local.head_recovery ? 1 : 0

  name                  = "${var.name}-head"
  description           = "skyinfra cluster ${var.name}: the head's role (node-0, aws.recover): the node role's permissions and re-creating this cluster's lost nodes"
  assume_role_policy    = data.aws_iam_policy_document.assume_role.json
  force_detach_policies = true

  tags = merge(local.base_tags, { Name = "${var.name}-head" })
}

resource "aws_iam_role_policy_attachment" "head" {
  for_each = local.head_recovery ? toset(var.instance_profile_policy_arns) : toset([])

  role       = aws_iam_role.head[0].name
  policy_arn = each.value
}

resource "aws_iam_role_policy" "head_staged_read" {
  count = local.head_recovery && var.staged_read != null ? 1 : 0

  name   = "${var.name}-staged-read"
  role   = aws_iam_role.head[0].id
  policy = data.aws_iam_policy_document.staged_read[0].json
}

resource "aws_iam_role_policy" "head_checkpoints" {
  count = local.head_recovery && var.checkpoints != null ? 1 : 0

  name   = "${var.name}-checkpoints"
  role   = aws_iam_role.head[0].id
  policy = data.aws_iam_policy_document.checkpoints[0].json
}

resource "aws_iam_role_policy" "head_recover" {
  count = local.head_recovery ? 1 : 0

  name   = "${var.name}-recover"
  role   = aws_iam_role.head[0].id
  policy = data.aws_iam_policy_document.head_recover[0].json
}

resource "aws_iam_instance_profile" "head" {
  count = local.head_recovery ? 1 : 0

  name = "${var.name}-head"
  role = aws_iam_role.head[0].name

  tags = merge(local.base_tags, { Name = "${var.name}-head" })
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
  iam_instance_profile = local.head_recovery && each.key == "node-0" ? aws_iam_instance_profile.head[0].name : aws_iam_instance_profile.this.name
  placement_group      = var.placement_group_enabled ? aws_placement_group.this[0].id : null

  # Without EFA the instance's own primary interface carries the fixed address; with EFA the
  # card-0 interface does, and AWS then refuses subnet, groups and public-address settings on
  # the instance itself (they belong to the interfaces).
  subnet_id                   = local.efa_enabled ? null : var.subnet_id
  private_ip                  = local.efa_enabled ? null : each.value.private_ip
  vpc_security_group_ids      = local.efa_enabled ? null : var.security_group_ids
  associate_public_ip_address = local.efa_enabled ? null : local.public[each.key]

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
