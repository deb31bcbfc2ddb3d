terraform {
  # terraform_data is built in (1.4+); no provider download is needed.
  required_version = ">= 1.5"
}
