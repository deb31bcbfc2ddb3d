# Plan/apply against a mocked AWS provider: no credentials, no API calls.
mock_provider "aws" {}

variables {
  name              = "unit"
  availability_zone = "us-east-1a"
}

run "new_vpc_subnet_and_routes" {
  command = apply

  assert {
    condition     = output.subnet_cidr_block == "10.42.0.0/24" && aws_route.internet[0].destination_cidr_block == "0.0.0.0/0"
    error_message = "A new VPC gets one subnet with a default route to the internet gateway."
  }

  assert {
    condition     = length(data.aws_subnet.existing) == 0 && aws_vpc.this[0].tags["Name"] == "unit-vpc"
    error_message = "No lookup of an existing subnet when creating one."
  }
}

run "existing_vpc_and_subnet" {
  command = plan

  variables {
    existing_vpc_id    = "vpc-0123456789abcdef0"
    existing_subnet_id = "subnet-0123456789abcdef0"
  }

  assert {
    condition     = length(aws_vpc.this) == 0 && length(aws_subnet.this) == 0 && length(data.aws_subnet.existing) == 1
    error_message = "Existing ids must create nothing."
  }
}

run "refuses_half_an_existing_network" {
  command = plan

  variables {
    existing_vpc_id = "vpc-0123456789abcdef0"
  }

  expect_failures = [var.existing_vpc_id]
}

run "private_subnet_reaches_s3_only" {
  command = apply

  variables {
    private_subnet           = true
    public_subnet_cidr_block = "10.42.255.240/28"
  }

  assert {
    condition     = length(aws_route.internet) == 0 && length(aws_route.nat) == 0 && length(aws_nat_gateway.this) == 0
    error_message = "A private subnet has no default route and no NAT gateway unless nat_gateway = true."
  }

  assert {
    condition     = aws_subnet.this[0].map_public_ip_on_launch == false && aws_subnet.public[0].map_public_ip_on_launch == true
    error_message = "Only the public subnet (bastion, NAT) gives public addresses."
  }

  assert {
    condition     = aws_vpc_endpoint.s3[0].vpc_endpoint_type == "Gateway" && aws_vpc_endpoint.s3[0].route_table_ids == toset([aws_route_table.this[0].id])
    error_message = "The S3 gateway endpoint sits in the nodes' route table."
  }

  assert {
    condition     = aws_route.public_internet[0].route_table_id == aws_route_table.public[0].id && length(aws_vpc_endpoint.interface) == 0
    error_message = "Only the public subnet's route table routes to the internet gateway; no interface endpoints unless asked."
  }
}

run "private_subnet_with_nat_and_ssm_endpoints" {
  command = apply

  variables {
    private_subnet           = true
    public_subnet_cidr_block = "10.42.255.240/28"
    nat_gateway              = true
    interface_endpoints      = ["ssm", "ssmmessages", "ec2messages"]
  }

  assert {
    condition     = aws_route.nat[0].destination_cidr_block == "0.0.0.0/0" && aws_nat_gateway.this[0].subnet_id == aws_subnet.public[0].id
    error_message = "nat_gateway routes the nodes' subnet to the internet through a NAT gateway in the public subnet."
  }

  assert {
    condition     = length(aws_vpc_endpoint.interface) == 3 && alltrue([for e in aws_vpc_endpoint.interface : e.private_dns_enabled && e.subnet_ids == toset([aws_subnet.this[0].id])])
    error_message = "The SSM interface endpoints are in the nodes' subnet with private DNS."
  }
}

run "node_zero_as_the_way_in_routes_back_to_the_operator_only" {
  command = plan

  variables {
    private_subnet     = true
    return_route_cidrs = ["203.0.113.7/32"]
  }

  assert {
    condition     = length(aws_route.return) == 1 && aws_route.return[0].destination_cidr_block == "203.0.113.7/32" && length(aws_route.internet) == 0 && length(aws_subnet.public) == 0
    error_message = "Without a bastion only the operator's blocks route to the internet gateway."
  }
}

run "refuses_nat_without_a_private_subnet" {
  command = plan

  variables {
    nat_gateway = true
  }

  expect_failures = [var.nat_gateway]
}

run "refuses_a_private_subnet_in_an_existing_vpc" {
  command = plan

  variables {
    private_subnet     = true
    existing_vpc_id    = "vpc-0123456789abcdef0"
    existing_subnet_id = "subnet-0123456789abcdef0"
  }

  expect_failures = [var.private_subnet]
}
