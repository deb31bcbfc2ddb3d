# Plan/apply against a mocked AWS provider: no credentials, no API calls.
mock_provider "aws" {
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

variables {
  name               = "unit"
  node_count         = 2
  instance_type      = "g5.xlarge"
  ami_id             = "ami-0123456789abcdef0"
  subnet_id          = "subnet-0123456789abcdef0"
  subnet_cidr_block  = "10.42.0.0/24"
  security_group_ids = ["sg-0123456789abcdef0"]
  ssh_public_key     = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk unit"
  tags               = { team = "ml", Name = "ignored" }
  instance_tags      = { team = "research", owner = "alice" }
}

run "topology_output_shape" {
  command = apply

  assert {
    condition     = keys(output.nodes) == ["node-0", "node-1"]
    error_message = "The nodes output must be keyed by node name."
  }

  assert {
    condition = alltrue([
      for node in values(output.nodes) :
      toset(keys(node)) == toset(["index", "instance_id", "private_ip", "public_ip", "availability_zone", "efa_interface_ids"])
    ])
    error_message = "Every node must carry index, instance_id, private_ip, public_ip, availability_zone, efa_interface_ids."
  }

  assert {
    condition     = output.nodes["node-0"].private_ip == "10.42.0.10" && output.nodes["node-1"].private_ip == "10.42.0.11" && output.nodes["node-1"].index == 1
    error_message = "Private addresses must be fixed: cidrhost(subnet, offset + index)."
  }
}

run "hardened_instances" {
  command = plan

  assert {
    condition     = alltrue([for i in aws_instance.this : i.metadata_options[0].http_tokens == "required" && i.metadata_options[0].http_put_response_hop_limit == 1])
    error_message = "IMDSv2 must be required with hop limit 1."
  }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.root_block_device[0].encrypted && i.root_block_device[0].volume_type == "gp3" && i.root_block_device[0].volume_size == 200])
    error_message = "The root volume must be encrypted gp3 of the configured size."
  }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.instance_initiated_shutdown_behavior == "terminate"])
    error_message = "An idle node's shutdown must terminate it."
  }

  assert {
    condition     = aws_instance.this["node-1"].tags == tomap({ team = "research", owner = "alice", Name = "unit-node-1", "skyinfra:cluster" = "unit", "skyinfra:node" = "node-1", "skyinfra:index" = "1" })
    error_message = "Tags must merge in a fixed order: tags < instance_tags < identity tags."
  }

  assert {
    condition     = length(aws_placement_group.this) == 0 && length(aws_network_interface.efa) == 0
    error_message = "Placement group and EFA are off by default."
  }
}

run "placement_group_and_efa" {
  command = plan

  variables {
    instance_type           = "p4d.24xlarge"
    placement_group_enabled = true
    efa_interface_count     = 4
  }

  assert {
    condition     = aws_placement_group.this[0].strategy == "cluster"
    error_message = "The placement group must use the cluster strategy."
  }

  assert {
    condition     = length(aws_network_interface.efa) == 8
    error_message = "Every node needs one EFA interface per network card."
  }

  assert {
    condition = alltrue([
      for key, eni in aws_network_interface.efa :
      eni.interface_type == (endswith(key, "/0") ? "efa" : "efa-only")
    ])
    error_message = "Card 0 is an EFA with ENA; the other cards are EFA-only interfaces."
  }

  assert {
    condition     = length(aws_eip.node) == 2 && aws_eip.node["node-1"].associate_with_private_ip == "10.42.0.11" && aws_eip.node["node-0"].domain == "vpc"
    error_message = "Every EFA node gets an Elastic IP on its card-0 interface's fixed address."
  }

  assert {
    condition     = aws_network_interface.efa["node-1/0"].private_ips == toset(["10.42.0.11"])
    error_message = "The card-0 interface carries the node's fixed address."
  }

  assert {
    condition     = [for ni in aws_instance.this["node-0"].network_interface : [ni.network_card_index, ni.device_index]] == [[0, 0], [1, 1], [2, 1], [3, 1]]
    error_message = "The instance attaches one EFA interface per card: card 0 at device 0, the others at device 1."
  }
}

run "efa_without_public_addresses" {
  command = plan

  variables {
    efa_interface_count         = 1
    associate_public_ip_address = false
  }

  assert {
    condition     = length(aws_eip.node) == 0 && length(aws_network_interface.efa) == 2
    error_message = "No Elastic IP when the nodes are not to be public."
  }
}

run "no_eip_without_efa" {
  command = plan

  assert {
    condition     = length(aws_eip.node) == 0 && alltrue([for i in aws_instance.this : i.associate_public_ip_address])
    error_message = "Without EFA the instances take the subnet's public address, no Elastic IP."
  }
}

# Issue 46: a private network without a bastion makes node-0 alone the way in.
run "only_public_nodes_get_an_address" {
  command = plan

  variables {
    public_nodes = ["node-0"]
  }

  assert {
    condition     = aws_instance.this["node-0"].associate_public_ip_address && !aws_instance.this["node-1"].associate_public_ip_address
    error_message = "public_nodes gives node-0 alone a public address."
  }
}

run "efa_private_nodes_take_no_elastic_ip_but_the_way_in" {
  command = plan

  variables {
    efa_interface_count = 1
    public_nodes        = ["node-0"]
  }

  assert {
    condition     = keys(aws_eip.node) == ["node-0"]
    error_message = "With EFA only the public node-0 takes an Elastic IP."
  }
}

run "more_than_64_nodes" {
  command = plan

  variables {
    node_count        = 70
    subnet_cidr_block = "10.42.0.0/23"
  }

  assert {
    condition     = length(aws_instance.this) == 70 && aws_instance.this["node-69"].private_ip == "10.42.0.79"
    error_message = "No cap at 64 nodes: the subnet's size is the limit."
  }
}

run "refuses_a_subnet_too_small" {
  command = plan

  variables {
    node_count = 246
  }

  expect_failures = [var.private_ip_host_offset]
}

run "refuses_reserved_addresses" {
  command = plan

  variables {
    private_ip_host_offset = 2
  }

  expect_failures = [var.private_ip_host_offset]
}

run "refuses_ssm_path_as_ami" {
  command = plan

  variables {
    ami_id = "/aws/service/deeplearning/ami/x86_64/latest/ami-id"
  }

  expect_failures = [var.ami_id]
}

# Past 16 KB skyinfra gzips the document and passes it as base64 (text = null): the size check
# must not fail on the null text (Terraform 1.11 does not short-circuit ||, 1.15 does; the e2e test
# on the external terraform 1.11 binary caught it).
run "gzipped_user_data_goes_as_base64" {
  command = plan

  variables {
    user_data = {
      "node-0" = { text = null, base64 = "H4sIAAAAAAAC/0vOzy1IzEvVS87PBQCVrz5bCwAAAA==" }
      "node-1" = { text = "#cloud-config\n", base64 = null }
    }
  }

  assert {
    condition     = length(aws_instance.this) == 2
    error_message = "A gzipped (base64) user_data entry must plan."
  }
}

run "refuses_user_data_text_over_16kb" {
  command = plan

  variables {
    user_data = {
      "node-0" = { text = format("#cloud-config\n%s", join("", [for i in range(1000) : "# padding, padding\n"])), base64 = null }
    }
  }

  expect_failures = [var.user_data]
}

# Capacity (issue 13): a Capacity Block targets the reservation with its market type.
run "capacity_block" {
  command = plan

  variables {
    capacity_reservation = { id = "cr-0123456789abcdef0", capacity_block = true }
  }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.capacity_reservation_specification[0].capacity_reservation_target[0].capacity_reservation_id == "cr-0123456789abcdef0"])
    error_message = "Every node must target the capacity reservation."
  }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.instance_market_options[0].market_type == "capacity-block"])
    error_message = "A Capacity Block needs the capacity-block market type."
  }
}

run "refuses_a_malformed_reservation_id" {
  command = plan

  variables {
    capacity_reservation = { id = "odcr-1", capacity_block = false }
  }

  expect_failures = [var.capacity_reservation]
}

# Spot (issue 26): only the nodes node_markets names "spot" get Spot market options.
run "on_demand_by_default" {
  command = plan

  assert {
    condition     = alltrue([for i in aws_instance.this : length(i.instance_market_options) == 0])
    error_message = "Without node_markets every node is On-Demand (no market options)."
  }
}

run "spot_workers" {
  command = plan

  variables {
    node_count     = 3
    node_markets   = { "node-0" = "on-demand", "node-1" = "spot", "node-2" = "spot" }
    spot_max_price = 1.25
  }

  assert {
    condition     = length(aws_instance.this["node-0"].instance_market_options) == 0
    error_message = "An On-Demand node (the head here) must have no market options."
  }

  assert {
    condition = alltrue([
      for node in ["node-1", "node-2"] :
      aws_instance.this[node].instance_market_options[0].market_type == "spot" &&
      aws_instance.this[node].instance_market_options[0].spot_options[0].spot_instance_type == "one-time" &&
      aws_instance.this[node].instance_market_options[0].spot_options[0].instance_interruption_behavior == "terminate" &&
      aws_instance.this[node].instance_market_options[0].spot_options[0].max_price == "1.2500"
    ])
    error_message = "A Spot node must be a one-time request, terminated when interrupted, capped at spot_max_price."
  }
}

run "spot_without_a_max_price" {
  command = plan

  variables {
    node_markets = { "node-1" = "spot" }
  }

  assert {
    condition     = aws_instance.this["node-1"].instance_market_options[0].market_type == "spot" && length(aws_instance.this["node-0"].instance_market_options) == 0
    error_message = "A node left out of node_markets is On-Demand; a named one is Spot."
  }
}

run "refuses_an_unknown_market" {
  command = plan

  variables {
    node_markets = { "node-1" = "spto" }
  }

  expect_failures = [var.node_markets]
}

run "refuses_a_market_for_a_node_that_does_not_exist" {
  command = plan

  variables {
    node_markets = { "node-2" = "spot" }
  }

  expect_failures = [var.node_markets]
}

run "refuses_spot_in_a_capacity_reservation" {
  command = plan

  variables {
    node_markets         = { "node-1" = "spot" }
    capacity_reservation = { id = "cr-0123456789abcdef0", capacity_block = false }
  }

  expect_failures = [var.node_markets]
}

run "refuses_a_max_price_of_zero" {
  command = plan

  variables {
    node_markets   = { "node-1" = "spot" }
    spot_max_price = 0
  }

  expect_failures = [var.spot_max_price]
}

# Checkpoints (issue 25): the nodes' role gets exactly the checkpoint prefix.
run "no_checkpoint_access_by_default" {
  command = plan

  assert {
    condition     = length(aws_iam_role_policy.checkpoints) == 0
    error_message = "Without a checkpoint prefix the nodes' role gets no S3 write access."
  }
}

run "checkpoint_access_is_the_prefix_only" {
  command = plan

  variables {
    checkpoints = { bucket = "ckpt-bucket", prefix = "team/ckpts" }
  }

  assert {
    condition     = aws_iam_role_policy.checkpoints[0].name == "unit-checkpoints"
    error_message = "The checkpoint policy is the cluster's own inline policy."
  }

  assert {
    condition = (
      toset(data.aws_iam_policy_document.checkpoints[0].statement[0].actions) == toset(["s3:ListBucket"])
      && endswith(one(data.aws_iam_policy_document.checkpoints[0].statement[0].resources), ":s3:::ckpt-bucket")
      && one(data.aws_iam_policy_document.checkpoints[0].statement[0].condition).test == "StringLike"
      && one(data.aws_iam_policy_document.checkpoints[0].statement[0].condition).variable == "s3:prefix"
      && toset(one(data.aws_iam_policy_document.checkpoints[0].statement[0].condition).values) == toset(["team/ckpts/*"])
    )
    error_message = "Listing is allowed on the bucket only for keys under the prefix."
  }

  assert {
    condition = (
      toset(data.aws_iam_policy_document.checkpoints[0].statement[1].actions) == toset(["s3:GetObject", "s3:PutObject", "s3:DeleteObject"])
      && length(data.aws_iam_policy_document.checkpoints[0].statement[1].resources) == 1
      && endswith(one(data.aws_iam_policy_document.checkpoints[0].statement[1].resources), ":s3:::ckpt-bucket/team/ckpts/*")
    )
    error_message = "Get, put and delete are allowed on bucket/prefix/* and nothing else."
  }
}

run "refuses_a_wildcard_checkpoint_prefix" {
  command = plan

  variables {
    checkpoints = { bucket = "ckpt-bucket", prefix = "team/*" }
  }

  expect_failures = [var.checkpoints]
}

run "refuses_a_checkpoint_prefix_with_a_trailing_slash" {
  command = plan

  variables {
    checkpoints = { bucket = "ckpt-bucket", prefix = "team/" }
  }

  expect_failures = [var.checkpoints]
}

run "refuses_a_bad_checkpoint_bucket" {
  command = plan

  variables {
    checkpoints = { bucket = "Ckpt_Bucket", prefix = "team" }
  }

  expect_failures = [var.checkpoints]
}

# Unattended recovery (issue 26, aws.recover): node-0 alone gets the head's role.
run "no_head_role_by_default" {
  command = plan

  assert {
    condition = (
      length(aws_iam_role.head) == 0 && length(aws_iam_instance_profile.head) == 0
      && length(aws_iam_role_policy.head_recover) == 0 && length(data.aws_iam_policy_document.head_recover) == 0
      && length(aws_iam_role_policy_attachment.head) == 0 && length(aws_iam_role_policy.head_checkpoints) == 0
      && length(aws_iam_role_policy.head_staged_read) == 0
    )
    error_message = "Without head_recovery there is no head role, profile or recover policy."
  }

  assert {
    condition     = alltrue([for i in aws_instance.this : i.iam_instance_profile == "unit-node"])
    error_message = "Without head_recovery every node, node-0 included, uses the node profile."
  }

  assert {
    condition     = output.head_instance_profile_name == null
    error_message = "The head's profile output is null when off."
  }
}

run "head_role_for_node_0_only" {
  command = plan

  variables {
    node_count                   = 3
    instance_profile_policy_arns = ["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"]
    staged_read                  = { bucket = "stage-bucket", prefix = "unit/wheels/" }
    checkpoints                  = { bucket = "ckpt-bucket", prefix = "team/ckpts" }
    head_recovery = {
      bucket    = "team-state"
      state_key = "skyinfra/unit/terraform.tfstate"
      lock_key  = "skyinfra/unit/terraform.tfstate.tflock"
    }
  }

  assert {
    condition     = aws_iam_role.head[0].name == "unit-head" && aws_iam_instance_profile.head[0].name == "unit-head" && aws_iam_instance_profile.head[0].role == "unit-head"
    error_message = "The head's role and instance profile are both <name>-head."
  }

  assert {
    condition     = aws_instance.this["node-0"].iam_instance_profile == "unit-head" && aws_instance.this["node-1"].iam_instance_profile == "unit-node" && aws_instance.this["node-2"].iam_instance_profile == "unit-node"
    error_message = "node-0 uses the head's profile; every other node keeps the node profile."
  }

  assert {
    condition     = aws_iam_role.head[0].tags["skyinfra:cluster"] == "unit" && aws_iam_instance_profile.head[0].tags["skyinfra:cluster"] == "unit"
    error_message = "The head's role and profile carry the cluster's tag."
  }

  assert {
    condition = (
      keys(aws_iam_role_policy_attachment.head) == ["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"]
      && aws_iam_role_policy.head_staged_read[0].name == "unit-staged-read"
      && aws_iam_role_policy.head_checkpoints[0].name == "unit-checkpoints"
      && aws_iam_role_policy.head_recover[0].name == "unit-recover"
    )
    error_message = "The head gets the node role's managed policies, staged-read and checkpoints policies, plus its recover policy."
  }

  assert {
    condition     = output.head_instance_profile_name == "unit-head" && output.instance_profile_name == "unit-node"
    error_message = "Both profiles are in the outputs."
  }
}

run "head_recover_policy_is_the_cluster_only" {
  command = plan

  variables {
    node_markets = { "node-1" = "spot" }
    head_recovery = {
      bucket    = "team-state"
      state_key = "skyinfra/unit/terraform.tfstate"
      lock_key  = "skyinfra/unit/terraform.tfstate.tflock"
    }
  }

  assert {
    condition = (
      data.aws_iam_policy_document.head_recover[0].statement[0].actions == toset(["s3:ListBucket"])
      && endswith(one(data.aws_iam_policy_document.head_recover[0].statement[0].resources), ":s3:::team-state")
      && one(data.aws_iam_policy_document.head_recover[0].statement[0].condition).variable == "s3:prefix"
      && toset(one(data.aws_iam_policy_document.head_recover[0].statement[0].condition).values) == toset(["skyinfra/unit/*"])
    )
    error_message = "The head may list the cluster's state folder only."
  }

  assert {
    condition = (
      data.aws_iam_policy_document.head_recover[0].statement[1].actions == toset(["s3:GetObject", "s3:PutObject"])
      && endswith(one(data.aws_iam_policy_document.head_recover[0].statement[1].resources), ":s3:::team-state/skyinfra/unit/terraform.tfstate")
      && data.aws_iam_policy_document.head_recover[0].statement[2].actions == toset(["s3:GetObject", "s3:PutObject", "s3:DeleteObject"])
      && endswith(one(data.aws_iam_policy_document.head_recover[0].statement[2].resources), ":s3:::team-state/skyinfra/unit/terraform.tfstate.tflock")
    )
    error_message = "Read and write the state object; read, write and delete its lock object; nothing else in S3."
  }

  assert {
    condition = alltrue([
      for s in data.aws_iam_policy_document.head_recover[0].statement :
      length(setintersection(s.actions, toset(["ec2:TerminateInstances", "ec2:StopInstances", "ec2:ModifyInstanceAttribute", "iam:PutRolePolicy", "iam:CreateRole", "iam:AttachRolePolicy", "s3:DeleteBucket"]))) == 0
      && !anytrue([for a in s.actions : startswith(a, "ec2:Delete") || startswith(a, "iam:Delete") || startswith(a, "iam:Put") || startswith(a, "iam:Create") || a == "*" || a == "ec2:*" || a == "s3:*" || a == "iam:*"])
    ])
    error_message = "The head may terminate, delete or write IAM nothing."
  }

  assert {
    condition = alltrue([
      for s in data.aws_iam_policy_document.head_recover[0].statement :
      s.sid != "LaunchOnlyInstancesTaggedForTheCluster" || (
        one(s.condition).variable == "aws:RequestTag/skyinfra:cluster" && toset(one(s.condition).values) == toset(["unit"])
        && alltrue([for r in s.resources : endswith(r, ":instance/*") || endswith(r, ":volume/*")])
      )
    ])
    error_message = "New instances and volumes only with the cluster's tag in the request."
  }

  assert {
    condition = alltrue([
      for s in data.aws_iam_policy_document.head_recover[0].statement :
      s.sid != "LaunchWithTheClusterNetworkAndKey" || (
        anytrue([for r in s.resources : endswith(r, ":subnet/subnet-0123456789abcdef0")])
        && anytrue([for r in s.resources : endswith(r, ":security-group/sg-0123456789abcdef0")])
        && anytrue([for r in s.resources : endswith(r, ":spot-instances-request/*")])
        && !anytrue([for r in s.resources : endswith(r, ":subnet/*") || endswith(r, ":security-group/*")])
      )
    ])
    error_message = "The launch may use the cluster's subnet and security group only (and a Spot request with Spot nodes)."
  }

  assert {
    condition = alltrue([
      for s in data.aws_iam_policy_document.head_recover[0].statement :
      s.sid != "PassTheNodeRoleToEC2" || (
        s.actions == toset(["iam:PassRole"]) && length(s.resources) == 1
        && one(s.condition).variable == "iam:PassedToService" && toset(one(s.condition).values) == toset(["ec2.amazonaws.com"])
      )
    ])
    error_message = "The head may pass the node role, to EC2 only."
  }

  assert {
    condition = alltrue([
      for s in data.aws_iam_policy_document.head_recover[0].statement :
      s.sid != "TagOnlyAtLaunch" || (one(s.condition).variable == "ec2:CreateAction" && toset(one(s.condition).values) == toset(["RunInstances"]))
    ])
    error_message = "Tags only at launch."
  }

  assert {
    condition = alltrue([
      for s in data.aws_iam_policy_document.head_recover[0].statement :
      s.sid != "ReadTheClusterConsoles" || (
        one(s.condition).variable == "ec2:ResourceTag/skyinfra:cluster" && toset(one(s.condition).values) == toset(["unit"])
        && alltrue([for r in s.resources : endswith(r, ":instance/*")])
      )
    ])
    error_message = "Console output of the cluster's instances only."
  }
}

run "refuses_a_wildcard_state_key" {
  command = plan

  variables {
    head_recovery = { bucket = "team-state", state_key = "skyinfra/*/terraform.tfstate", lock_key = "skyinfra/*/terraform.tfstate.tflock" }
  }

  expect_failures = [var.head_recovery]
}

run "refuses_a_state_key_outside_a_folder" {
  command = plan

  variables {
    head_recovery = { bucket = "team-state", state_key = "terraform.tfstate", lock_key = "terraform.tfstate.tflock" }
  }

  expect_failures = [var.head_recovery]
}

run "refuses_a_lock_key_away_from_the_state" {
  command = plan

  variables {
    head_recovery = { bucket = "team-state", state_key = "skyinfra/unit/terraform.tfstate", lock_key = "skyinfra/other/terraform.tfstate.tflock" }
  }

  expect_failures = [var.head_recovery]
}

run "refuses_a_bad_state_bucket" {
  command = plan

  variables {
    head_recovery = { bucket = "Team_State", state_key = "skyinfra/unit/terraform.tfstate", lock_key = "skyinfra/unit/terraform.tfstate.tflock" }
  }

  expect_failures = [var.head_recovery]
}
