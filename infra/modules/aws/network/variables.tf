variable "name" {
  description = "Cluster name; prefixes the Name tag of every resource."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$", var.name))
    error_message = "The name must be 1-40 characters of lower-case letters, digits and '-', starting with a letter and not ending with '-'."
  }
}

variable "availability_zone" {
  description = "Availability zone of the new subnet (ignored when an existing subnet is given)."
  type        = string
  default     = null
}

variable "vpc_cidr_block" {
  description = "CIDR block of the new VPC."
  type        = string
  default     = "10.42.0.0/16"
  nullable    = false

  validation {
    condition     = can(cidrhost(var.vpc_cidr_block, 0)) && !can(regex(":", var.vpc_cidr_block))
    error_message = "The vpc_cidr_block must be an IPv4 CIDR block such as 10.42.0.0/16."
  }
}

variable "subnet_cidr_block" {
  description = "CIDR block of the new subnet; must lie inside vpc_cidr_block."
  type        = string
  default     = "10.42.0.0/24"
  nullable    = false

  validation {
    condition     = can(cidrhost(var.subnet_cidr_block, 0)) && !can(regex(":", var.subnet_cidr_block))
    error_message = "The subnet_cidr_block must be an IPv4 CIDR block such as 10.42.0.0/24."
  }
}

variable "map_public_ip_on_launch" {
  description = "Give instances in the new subnet a public IPv4 address (needed to reach them over SSH without a bastion)."
  type        = bool
  default     = true
  nullable    = false
}

variable "existing_vpc_id" {
  description = "Use this VPC instead of creating one; give existing_subnet_id with it."
  type        = string
  default     = null

  validation {
    condition     = var.existing_vpc_id == null || can(regex("^vpc-[0-9a-f]+$", var.existing_vpc_id))
    error_message = "The existing_vpc_id must look like vpc-0123456789abcdef0."
  }

  validation {
    condition     = (var.existing_vpc_id == null) == (var.existing_subnet_id == null)
    error_message = "Give both existing_vpc_id and existing_subnet_id, or neither (then a new VPC and subnet are created)."
  }
}

variable "existing_subnet_id" {
  description = "Use this subnet (inside existing_vpc_id) instead of creating one."
  type        = string
  default     = null

  validation {
    condition     = var.existing_subnet_id == null || can(regex("^subnet-[0-9a-f]+$", var.existing_subnet_id))
    error_message = "The existing_subnet_id must look like subnet-0123456789abcdef0."
  }
}

variable "tags" {
  description = "Tags for every resource; the Name tag set by this module wins over a Name given here."
  type        = map(string)
  default     = {}
  nullable    = false
}
