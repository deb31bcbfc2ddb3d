"""The ssh target: machines the user already has, enrolled over SSH (issue 45)."""
