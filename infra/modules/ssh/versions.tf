terraform {
  # terraform_data and the ssh connection are built in (1.4+); no provider download is needed.
  required_version = ">= 1.5"
}
