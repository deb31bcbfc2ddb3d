# Rendered by skyinfra for cluster "demo" (provider local). Do not edit by hand:
# change the cluster spec and run `skyinfra up` again. Values live in terraform.tfvars; the
# module it calls is skyinfra's, copied into ./modules/local, and the node bootstrap into ./scripts.

terraform {
  required_version = ">= 1.5"
}

variable "cluster_name" {
  type = string
}

variable "node_count" {
  type = number
}

variable "base_address" {
  type = string
}

variable "head_port" {
  type = number
}

variable "node_root" {
  type = string
}

variable "python" {
  type = string
}

variable "wheel_path" {
  type = string
}

variable "wheel_sha256" {
  type = string
}

variable "python_packages" {
  type = list(string)
}

variable "uv" {
  type = string
}

variable "uv_cache_dir" {
  type = string
}

module "nodes" {
  source = "./modules/local"

  cluster_name     = var.cluster_name
  node_count       = var.node_count
  base_address     = var.base_address
  head_port        = var.head_port
  node_root        = var.node_root
  python           = var.python
  bootstrap_script = abspath("${path.module}/scripts/bootstrap-node.sh")
  wheel_path       = var.wheel_path
  wheel_sha256     = var.wheel_sha256
  python_packages  = var.python_packages
  uv               = var.uv
  uv_cache_dir     = var.uv_cache_dir
}

output "schema" {
  value = 1
}

output "cluster" {
  value = var.cluster_name
}

output "provider" {
  value = "local"
}

output "head_addr" {
  value = module.nodes.head_addr
}

output "head_port" {
  value = module.nodes.head_port
}

output "nodes" {
  value = module.nodes.nodes
}
