"""The AWS end-to-end tests' fixtures (the user's shell, the seeded DLAMI, moto read back like
EC2, an SSH key): tests/support/aws_e2e.py."""

from tests.support.aws_e2e import cli_env, dlami, moto_like_ec2, ssh_key  # noqa: F401
