"""skyinfra: multi-node GPU clusters from reviewable Terraform (operator side)."""

__version__ = "0.1.0"
