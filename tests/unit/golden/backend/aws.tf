# Rendered by skyinfra for cluster "train": its state lives in s3://team-state/sky.
# Terraform's S3 lock file guards it (use_lockfile): one apply at a time, team-wide.

terraform {
  backend "s3" {
    bucket       = "team-state"
    key          = "sky/train/terraform.tfstate"
    region       = "eu-west-1"
    encrypt      = true
    use_lockfile = true
  }
}
