# Plan/apply against a mocked AWS provider: no credentials, no API calls.
mock_provider "aws" {
  mock_resource "aws_security_group" {
    defaults = {
      id = "sg-0123456789abcdef0"
    }
  }
}

variables {
  name              = "unit"
  vpc_id            = "vpc-0123456789abcdef0"
  ssh_ingress_cidrs = ["203.0.113.7/32", "198.51.100.0/24"]
}

run "efa_self_rules_in_both_directions" {
  command = apply

  assert {
    condition     = aws_vpc_security_group_ingress_rule.self.ip_protocol == "-1" && aws_vpc_security_group_ingress_rule.self.referenced_security_group_id == aws_security_group.this.id
    error_message = "The ingress rule must allow all protocols from the group itself (EFA)."
  }

  assert {
    condition     = aws_vpc_security_group_egress_rule.self.ip_protocol == "-1" && aws_vpc_security_group_egress_rule.self.referenced_security_group_id == aws_security_group.this.id
    error_message = "The egress rule must allow all protocols to the group itself (EFA)."
  }
}

run "ssh_only_from_the_given_cidrs" {
  command = apply

  assert {
    condition     = tolist(output.ssh_ingress_cidrs) == tolist(["198.51.100.0/24", "203.0.113.7/32"])
    error_message = "SSH must be open to exactly the given CIDRs."
  }

  assert {
    condition     = alltrue([for rule in aws_vpc_security_group_ingress_rule.ssh : rule.cidr_ipv4 != "0.0.0.0/0" && rule.from_port == 22 && rule.to_port == 22])
    error_message = "No SSH rule may be open to the world."
  }
}

run "refuses_world_ssh_without_opt_in" {
  command = plan

  variables {
    ssh_ingress_cidrs = ["0.0.0.0/0"]
  }

  expect_failures = [var.ssh_ingress_cidrs]
}

run "refuses_ssh_without_cidrs" {
  command = plan

  variables {
    ssh_ingress_cidrs = []
  }

  expect_failures = [var.ssh_ingress_cidrs]
}

run "world_ssh_with_explicit_opt_in" {
  command = plan

  variables {
    ssh_ingress_cidrs       = ["0.0.0.0/0"]
    allow_ssh_from_anywhere = true
  }

  assert {
    condition     = length(aws_vpc_security_group_ingress_rule.ssh) == 1
    error_message = "With the opt-in, the world-open SSH rule is rendered."
  }
}

run "no_ssh_rule_when_ssh_is_off" {
  command = plan

  variables {
    enable_ssh        = false
    ssh_ingress_cidrs = []
  }

  assert {
    condition     = length(aws_vpc_security_group_ingress_rule.ssh) == 0
    error_message = "SSH off must render no SSH rule."
  }
}
