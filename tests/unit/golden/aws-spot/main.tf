# Rendered by skyinfra for cluster "demo". Review it like any Terraform: the
# reusable modules are skyinfra's infra/modules/aws, copied into ./modules/aws; every value is
# in terraform.tfvars.json.

terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "5.100.0"
    }
  }
}

provider "aws" {
  region = var.region

  # Capacity failover (skyinfra up tries the next zone itself): the provider's SDK retries
  # InsufficientInstanceCapacity (HTTP 500) like any server error, up to 25 times with back-off,
  # which hides a full zone for many minutes (hashicorp/terraform-provider-aws#43193).
  max_retries = 5
}

variable "region" {
  description = "AWS region of the cluster."
  type        = string
}

variable "cluster" {
  description = "Every cluster setting; see terraform.tfvars.json."
  type = object({
    name                    = string
    availability_zone       = string
    vpc_cidr_block          = string
    subnet_cidr_block       = string
    existing_vpc_id         = optional(string)
    existing_subnet_id      = optional(string)
    enable_ssh              = bool
    ssh_ingress_cidrs       = list(string)
    allow_ssh_from_anywhere = bool
    node_count              = number
    instance_type           = string
    ami_id                  = string
    ssh_public_key          = string
    root_volume_size_gb     = number
    private_ip_host_offset  = number
    placement_group_enabled = bool
    efa_interface_count     = number
    head_port               = number
    accelerator = optional(object({
      type  = string
      count = number
    }))
    tags = map(string)
    # Capacity (issue 13): an ODCR or Capacity Block the nodes launch into, or null.
    capacity_reservation = optional(object({
      id             = string
      capacity_block = bool
    }))
    # Spot (issue 26): each node's market ("on-demand" or "spot") by name, and the Spot
    # nodes' price cap in USD per hour (null: the On-Demand price).
    node_markets   = optional(map(string), {})
    spot_max_price = optional(number)
    # The network (issue 46): "public" (every node has a public address) or "private" (no
    # node has one; the way in is the bastion, or node-0 without one), NAT, Session Manager.
    network                  = optional(string, "public")
    bastion                  = optional(bool, false)
    bastion_instance_type    = optional(string, "t3.micro")
    bastion_ami              = optional(string)
    bastion_user             = optional(string, "ec2-user")
    public_subnet_cidr_block = optional(string)
    nat                      = optional(bool, false)
    ssm                      = optional(bool, false)
  })

  validation {
    condition     = contains(["public", "private"], var.cluster.network)
    error_message = "cluster.network must be \"public\" or \"private\"."
  }
}

variable "staging" {
  description = "Where the runtime wheel is staged in S3: the nodes' role may read bucket/prefix*, and bucket/wheelhouse* (a private network's S3 wheelhouse) when set."
  type = object({
    bucket     = string
    prefix     = string
    wheelhouse = optional(string)
  })
  default = null
}

variable "checkpoints" {
  description = "The S3 prefix the nodes keep checkpoints under: the nodes' role may list, read, write and delete bucket/prefix/* and nothing else of the bucket."
  type = object({
    bucket = string
    prefix = string
  })
  default = null
}

variable "user_data" {
  description = "Per-node cloud-init user data keyed by node name (text, or base64 of gzip)."
  type = map(object({
    text   = optional(string)
    base64 = optional(string)
  }))
}

module "network" {
  source = "../modules/aws/network"

  name                    = var.cluster.name
  availability_zone       = var.cluster.availability_zone
  vpc_cidr_block          = var.cluster.vpc_cidr_block
  subnet_cidr_block       = var.cluster.subnet_cidr_block
  existing_vpc_id         = var.cluster.existing_vpc_id
  existing_subnet_id      = var.cluster.existing_subnet_id
  map_public_ip_on_launch = var.cluster.enable_ssh
  tags                    = var.cluster.tags
}

module "security" {
  source = "../modules/aws/security"

  name                    = var.cluster.name
  vpc_id                  = module.network.vpc_id
  enable_ssh              = var.cluster.enable_ssh
  ssh_ingress_cidrs       = var.cluster.ssh_ingress_cidrs
  allow_ssh_from_anywhere = var.cluster.allow_ssh_from_anywhere
  tags                    = var.cluster.tags
}

module "nodes" {
  source = "../modules/aws/nodes"

  name                        = var.cluster.name
  node_count                  = var.cluster.node_count
  instance_type               = var.cluster.instance_type
  ami_id                      = var.cluster.ami_id
  subnet_id                   = module.network.subnet_id
  subnet_cidr_block           = module.network.subnet_cidr_block
  private_ip_host_offset      = var.cluster.private_ip_host_offset
  security_group_ids          = [module.security.security_group_id]
  ssh_public_key              = var.cluster.ssh_public_key
  root_volume_size_gb         = var.cluster.root_volume_size_gb
  associate_public_ip_address = var.cluster.enable_ssh
  placement_group_enabled     = var.cluster.placement_group_enabled
  efa_interface_count         = var.cluster.efa_interface_count
  user_data                   = var.user_data
  staged_read                 = var.staging
  checkpoints                 = var.checkpoints
  tags                        = var.cluster.tags

  capacity_reservation = var.cluster.capacity_reservation
  node_markets         = var.cluster.node_markets
  spot_max_price       = var.cluster.spot_max_price
}

# The topology contract (schema 1): skyinfra turns these outputs into topology.json, as for
# the local target.
output "schema" {
  description = "Version of the topology contract these outputs follow."
  value       = 1
}

output "cluster" {
  description = "Cluster name."
  value       = var.cluster.name
}

output "provider" {
  description = "The skyinfra target."
  value       = "aws"
}

output "head_addr" {
  description = "Private address of node-0, where the coordinator listens."
  value       = module.nodes.nodes["node-0"].private_ip
}

output "head_port" {
  description = "Coordinator port on the head node."
  value       = var.cluster.head_port
}

output "nodes" {
  description = "Every node keyed by name, with its accelerators (from DescribeInstanceTypes)."
  value = {
    for name, node in module.nodes.nodes : name => {
      index             = node.index
      name              = name
      instance_id       = node.instance_id
      private_ip        = node.private_ip
      public_ip         = node.public_ip
      availability_zone = node.availability_zone
      accelerator       = var.cluster.accelerator
    }
  }
}

output "placement_group_name" {
  description = "Cluster placement group, or null when off."
  value       = module.nodes.placement_group_name
}

output "security_group_id" {
  description = "The cluster's security group."
  value       = module.security.security_group_id
}
