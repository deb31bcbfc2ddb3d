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
