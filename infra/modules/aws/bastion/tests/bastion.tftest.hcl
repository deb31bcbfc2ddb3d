# Plan/apply against a mocked AWS provider: no credentials, no API calls.
mock_provider "aws" {
  # The newest Amazon Linux 2023 minimal, as the lookup finds it when ami_id is null.
  override_data {
    target = data.aws_ami.minimal
    values = {
      id   = "ami-0a1b2c3d4e5f60718"
      name = "al2023-ami-minimal-2023.6.20241010.0-kernel-6.1-x86_64"
    }
  }

  # The image, as DescribeImages gives it: a 45 GiB root snapshot.
  override_data {
    target = data.aws_ami.image
    values = {
      root_device_name = "/dev/sda1"
      block_device_mappings = [{
        device_name  = "/dev/sda1"
        ebs          = { volume_size = "45", snapshot_id = "snap-0123456789abcdef0" }
        no_device    = ""
        virtual_name = ""
      }]
    }
  }
}

variables {
  name              = "unit"
  vpc_id            = "vpc-0123456789abcdef0"
  subnet_id         = "subnet-0123456789abcdef0"
  nodes_cidr_block  = "10.42.0.0/24"
  ami_id            = "ami-0123456789abcdef0"
  key_name          = "unit-key"
  ssh_ingress_cidrs = ["203.0.113.7/32"]
}

run "one_small_public_host_with_ssh_from_the_given_blocks" {
  command = apply

  assert {
    condition     = aws_instance.this.associate_public_ip_address == true && aws_instance.this.instance_type == "t3.micro"
    error_message = "The bastion is a small instance with a public address."
  }

  assert {
    condition     = [for r in aws_vpc_security_group_ingress_rule.ssh : r.cidr_ipv4] == ["203.0.113.7/32"] && aws_vpc_security_group_egress_rule.ssh.cidr_ipv4 == "10.42.0.0/24" && aws_vpc_security_group_egress_rule.ssh.to_port == 22
    error_message = "SSH in from ssh_ingress_cidrs only, SSH out to the nodes' subnet only."
  }

  assert {
    condition     = aws_instance.this.metadata_options[0].http_tokens == "required" && aws_instance.this.root_block_device[0].encrypted == true
    error_message = "IMDSv2 and an encrypted root volume."
  }

  assert {
    condition     = strcontains(aws_instance.this.user_data, "emit_keys_to_console: true")
    error_message = "The bastion prints its SSH host keys on its console, where skyinfra pins them from."
  }
}

run "a_running_bastions_disk_is_not_resized_when_its_image_is" {
  command = plan

  # The bastion above was made from a 45 GiB image; its image now says 2 GiB (a bastion made
  # from the nodes' image before it had its own, planned again): EC2 refuses a shrink.
  override_data {
    target = data.aws_ami.image
    values = {
      root_device_name = "/dev/xvda"
      block_device_mappings = [{
        device_name  = "/dev/xvda"
        ebs          = { volume_size = "2", snapshot_id = "snap-0123456789abcdef1" }
        no_device    = ""
        virtual_name = ""
      }]
    }
  }

  assert {
    condition     = aws_instance.this.root_block_device[0].volume_size == 45
    error_message = "A running bastion's disk is never resized in place."
  }
}

run "a_small_image_of_its_own_and_an_8_gib_disk_by_default" {
  command = plan

  variables {
    ami_id = null
  }

  # Amazon Linux 2023 minimal's root snapshot is smaller than gp3's 8 GiB the module holds to.
  override_data {
    target = data.aws_ami.image
    values = {
      root_device_name = "/dev/xvda"
      block_device_mappings = [{
        device_name  = "/dev/xvda"
        ebs          = { volume_size = "2", snapshot_id = "snap-0123456789abcdef1" }
        no_device    = ""
        virtual_name = ""
      }]
    }
  }

  assert {
    condition     = aws_instance.this.ami == "ami-0a1b2c3d4e5f60718"
    error_message = "Without ami_id the bastion boots the Amazon Linux 2023 minimal the lookup found, not the nodes' image."
  }

  assert {
    condition     = aws_instance.this.root_block_device[0].volume_size == 8 && aws_instance.this.root_block_device[0].volume_type == "gp3"
    error_message = "The bastion's disk is 8 GiB of gp3."
  }

  assert {
    condition     = output.login_user == "ec2-user"
    error_message = "Amazon Linux's login user is ec2-user."
  }
}

run "the_given_image_and_its_login_user" {
  command = plan

  variables {
    login_user = "ubuntu"
  }

  assert {
    condition     = aws_instance.this.ami == "ami-0123456789abcdef0" && output.login_user == "ubuntu"
    error_message = "A given ami_id is booted and its login_user is the first hop's."
  }
}

run "refuses_a_malformed_image_id" {
  command = plan

  variables {
    ami_id = "al2023"
  }

  expect_failures = [var.ami_id]
}

run "refuses_ssh_from_anywhere" {
  command = plan

  variables {
    ssh_ingress_cidrs = ["0.0.0.0/0"]
  }

  expect_failures = [var.ssh_ingress_cidrs]
}

run "refuses_no_ssh_cidrs" {
  command = plan

  variables {
    ssh_ingress_cidrs = []
  }

  expect_failures = [var.ssh_ingress_cidrs]
}

run "root_volume_is_the_images_own_size_by_default" {
  command = plan

  assert {
    condition     = aws_instance.this.root_block_device[0].volume_size == 45
    error_message = "Without root_volume_size_gb the bastion's root volume is its image's snapshot size."
  }
}

run "root_volume_as_given" {
  command = plan

  variables {
    root_volume_size_gb = 60
  }

  assert {
    condition     = aws_instance.this.root_block_device[0].volume_size == 60
    error_message = "The given root_volume_size_gb is the bastion's root volume."
  }
}

run "refuses_a_root_volume_smaller_than_the_images_snapshot" {
  command = plan

  variables {
    root_volume_size_gb = 20
  }

  expect_failures = [aws_instance.this]
}

run "refuses_a_root_volume_under_8_gib" {
  command = plan

  variables {
    root_volume_size_gb = 4
  }

  expect_failures = [var.root_volume_size_gb]
}
