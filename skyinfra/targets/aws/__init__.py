"""The AWS target: preflight, wheel staging, cloud-init, root-module render, SSH transport."""
