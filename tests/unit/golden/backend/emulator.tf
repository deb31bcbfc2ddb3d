# Rendered by skyinfra for cluster "train": its state lives in s3://team-state/sky.
# Terraform's S3 lock file guards it (use_lockfile): one apply at a time, team-wide.

terraform {
  backend "s3" {
    bucket       = "team-state"
    key          = "sky/train/terraform.tfstate"
    region       = "eu-west-1"
    encrypt      = true
    use_lockfile = true

    # Emulator mode: the emulator's conventional dummy credentials, not secrets.
    endpoints                   = { s3 = "http://127.0.0.1:5000" }
    use_path_style              = true
    access_key                  = "test"
    secret_key                  = "test"
    skip_credentials_validation = true
    skip_requesting_account_id  = true
    skip_metadata_api_check     = true
    skip_region_validation      = true
  }
}
