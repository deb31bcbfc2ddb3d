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

variable "private_subnet" {
  description = "Make the nodes' subnet private: no public addresses, no default route to the internet (unless nat_gateway), S3 through a gateway endpoint. Needs a new VPC."
  type        = bool
  default     = false
  nullable    = false

  validation {
    condition     = !var.private_subnet || var.existing_subnet_id == null
    error_message = "private_subnet builds its own VPC and route table: leave existing_vpc_id and existing_subnet_id unset."
  }
}

variable "public_subnet_cidr_block" {
  description = "CIDR block of the public subnet of a private network (for a bastion or the NAT gateway); null: none."
  type        = string
  default     = null

  validation {
    condition     = var.public_subnet_cidr_block == null || (can(cidrhost(var.public_subnet_cidr_block, 0)) && !can(regex(":", var.public_subnet_cidr_block)))
    error_message = "The public_subnet_cidr_block must be an IPv4 CIDR block such as 10.42.255.240/28."
  }

  validation {
    condition     = var.public_subnet_cidr_block == null || var.private_subnet
    error_message = "public_subnet_cidr_block is for a private network: set private_subnet = true, or leave it null."
  }
}

variable "nat_gateway" {
  description = "Give the private subnet a default route through a NAT gateway in the public subnet (open egress to the internet, billed per hour and per GB)."
  type        = bool
  default     = false
  nullable    = false

  validation {
    condition     = !var.nat_gateway || (var.private_subnet && var.public_subnet_cidr_block != null)
    error_message = "nat_gateway needs private_subnet = true and a public_subnet_cidr_block to put the gateway in."
  }
}

variable "return_route_cidrs" {
  description = "Private subnet only: IPv4 blocks routed to the internet gateway, so that a node with a public address (node 0 as the way in) can answer them. Never 0.0.0.0/0 (that is nat_gateway's default route)."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for cidr in var.return_route_cidrs : can(cidrhost(cidr, 0)) && !can(regex(":", cidr)) && cidr != "0.0.0.0/0"])
    error_message = "Every entry of return_route_cidrs must be an IPv4 CIDR block narrower than 0.0.0.0/0."
  }
}

variable "interface_endpoints" {
  description = "Private subnet only: AWS services reached through interface endpoints in the nodes' subnet, by short name (ssm, ssmmessages, ec2messages for Session Manager)."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for name in var.interface_endpoints : can(regex("^[a-z0-9.-]+$", name))]) && (length(var.interface_endpoints) == 0 || var.private_subnet)
    error_message = "interface_endpoints are short service names (ssm, ssmmessages, ec2messages) and need private_subnet = true."
  }
}
