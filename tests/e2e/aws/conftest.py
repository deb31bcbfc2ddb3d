"""The AWS CLI tests' fixtures (the user's shell, the seeded DLAMI, moto read back like EC2,
an SSH key), shared with the other AWS end-to-end modules (test_zone_failover.py)."""

from tests.e2e.aws.test_cli import cli_env, dlami, moto_like_ec2, ssh_key  # noqa: F401
