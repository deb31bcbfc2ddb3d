# The way in to a private network: one small instance with the only public address, SSH from
# ssh_ingress_cidrs only, and SSH on to the nodes' subnet only. The nodes' security group
# allows SSH from this instance's group alone (the security module's ssh_source_security_group_ids).

# Its own small image, not the nodes' GPU one (a Deep Learning AMI's snapshot is tens of GB):
# the newest Amazon Linux 2023 minimal for x86_64 (t3.micro's), unless ami_id names one.
data "aws_ami" "minimal" {
  count       = var.ami_id == null ? 1 : 0
  most_recent = true
  owners      = ["amazon"]

  filter {
    name   = "name"
    values = ["al2023-ami-minimal-2023.*-x86_64"]
  }

  filter {
    name   = "architecture"
    values = ["x86_64"]
  }
}

# The image's root snapshot: EC2 refuses a root volume smaller than it, and a volume larger
# than needed is billed every hour the bastion lives.
data "aws_ami" "image" {
  include_deprecated = true

  filter {
    name   = "image-id"
    values = [local.ami_id]
  }
}

# The image and disk the bastion was asked for (null: the lookup's, the image's size): a new
# given ami_id or root_volume_size_gb replaces the bastion; a newer Amazon Linux release alone
# does not (a new host key and address mid-job for no gain: the bastion only forwards SSH).
resource "terraform_data" "image_choice" {
  input = { ami_id = var.ami_id, root_volume_size_gb = var.root_volume_size_gb }
}

locals {
  base_tags = merge(var.tags, { "skyinfra:cluster" = var.name })
  ami_id    = coalesce(var.ami_id, one(data.aws_ami.minimal[*].id))
  image_root_gb = try(one([
    for m in data.aws_ami.image.block_device_mappings : tonumber(m.ebs.volume_size)
    if m.device_name == data.aws_ami.image.root_device_name
  ]), null)
  # The given size, else the image's own, at least gp3's 8 GiB floor (Amazon Linux 2023
  # minimal's snapshot is smaller: 8 GiB is the bastion's disk).
  root_volume_size_gb = coalesce(var.root_volume_size_gb, max(8, coalesce(local.image_root_gb, 8)))
}

resource "aws_security_group" "this" {
  # checkov:skip=CKV2_AWS_5:The group is attached to the bastion instance below through vpc_security_group_ids.
  name        = "${var.name}-bastion"
  description = "skyinfra cluster ${var.name}: the bastion, SSH in from the given CIDRs and out to the nodes"
  vpc_id      = var.vpc_id

  tags = merge(local.base_tags, { Name = "${var.name}-bastion" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each = toset(var.ssh_ingress_cidrs)

  security_group_id = aws_security_group.this.id
  description       = "SSH from ${each.value}"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = each.value

  tags = merge(local.base_tags, { Name = "${var.name}-bastion-ssh" })
}

resource "aws_vpc_security_group_egress_rule" "ssh" {
  security_group_id = aws_security_group.this.id
  description       = "SSH to the nodes' subnet ${var.nodes_cidr_block}"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = var.nodes_cidr_block

  tags = merge(local.base_tags, { Name = "${var.name}-bastion-out" })
}

resource "aws_instance" "this" {
  # checkov:skip=CKV_AWS_88:The bastion is the private network's one way in: its public address is the point, and its group admits SSH from ssh_ingress_cidrs only.
  # checkov:skip=CKV2_AWS_41:The bastion forwards SSH and calls no AWS API: it gets no instance role, so no credentials sit on the one public host.
  # checkov:skip=CKV_AWS_126:Detailed (1-minute) monitoring is billed per instance and has no use for a forwarding host.
  ami                         = local.ami_id
  instance_type               = var.instance_type
  key_name                    = var.key_name
  subnet_id                   = var.subnet_id
  vpc_security_group_ids      = [aws_security_group.this.id]
  associate_public_ip_address = true
  monitoring                  = false
  ebs_optimized               = true

  # Its SSH host keys on the serial console at first boot, as the nodes' cloud-init prints
  # theirs: skyinfra reads them through EC2 GetConsoleOutput and pins them before the first
  # connection. No packages, no scripts: the bastion only forwards SSH.
  user_data = <<-EOT
    #cloud-config
    ssh:
      emit_keys_to_console: true
    ssh_key_console_blacklist: []
  EOT

  # IMDSv2 only, as on the nodes.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  lifecycle {
    # The disk is never resized in place: EC2 refuses a smaller one, and a bastion made from
    # another image (the nodes' Deep Learning AMI, before it had its own) keeps its disk.
    ignore_changes       = [ami, root_block_device[0].volume_size]
    replace_triggered_by = [terraform_data.image_choice]

    precondition {
      condition     = var.root_volume_size_gb == null || local.image_root_gb == null || coalesce(var.root_volume_size_gb, 0) >= coalesce(local.image_root_gb, 0)
      error_message = "The bastion's root_volume_size_gb (${coalesce(var.root_volume_size_gb, 0)} GiB) is smaller than its image ${local.ami_id}'s root snapshot (${coalesce(local.image_root_gb, 0)} GiB): EC2 refuses such a volume. Give at least the snapshot's size, or null for exactly it."
    }
  }

  # Encrypted; only as large as the image needs (the bastion keeps no data), not the nodes'
  # disk: the nodes' default 200 GB would cost more per hour than the instance.
  root_block_device {
    volume_type           = "gp3"
    volume_size           = local.root_volume_size_gb
    encrypted             = true
    delete_on_termination = true
  }

  tags = merge(local.base_tags, {
    Name            = "${var.name}-bastion"
    "skyinfra:role" = "bastion"
  })
  volume_tags = merge(local.base_tags, { Name = "${var.name}-bastion-root" })
}
