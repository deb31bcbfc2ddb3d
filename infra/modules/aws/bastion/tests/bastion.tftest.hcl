# Plan/apply against a mocked AWS provider: no credentials, no API calls.
mock_provider "aws" {}

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
