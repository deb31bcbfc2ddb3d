variable "name" {
  description = "Cluster name; the bastion and its group are called \"<name>-bastion\"."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$", var.name))
    error_message = "The name must be 1-40 characters of lower-case letters, digits and '-', starting with a letter and not ending with '-'."
  }
}

variable "vpc_id" {
  description = "VPC of the bastion's security group."
  type        = string
  nullable    = false
}

variable "subnet_id" {
  description = "The public subnet the bastion is placed in."
  type        = string
  nullable    = false
}

variable "nodes_cidr_block" {
  description = "IPv4 block of the nodes' subnet: the bastion may open SSH connections to it and nowhere else."
  type        = string
  nullable    = false

  validation {
    condition     = can(cidrhost(var.nodes_cidr_block, 0)) && !can(regex(":", var.nodes_cidr_block))
    error_message = "The nodes_cidr_block must be an IPv4 CIDR block such as 10.42.0.0/24."
  }
}

variable "ami_id" {
  description = "AMI of the bastion; null: the newest Amazon Linux 2023 minimal (x86_64), a small image with cloud-init, whose login user is ec2-user. Another image needs login_user."
  type        = string
  default     = null

  validation {
    condition     = var.ami_id == null ? true : can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "The ami_id must look like ami-0123456789abcdef0, or be null for Amazon Linux 2023 minimal."
  }
}

variable "login_user" {
  description = "The image's SSH login user, which the operator's ProxyJump logs in as (ec2-user: Amazon Linux's)."
  type        = string
  default     = "ec2-user"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.login_user))
    error_message = "The login_user must be a Unix user name such as ec2-user or ubuntu."
  }
}

variable "instance_type" {
  description = "A small, cheap instance type: the bastion only forwards SSH."
  type        = string
  default     = "t3.micro"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9-]+$", var.instance_type))
    error_message = "The instance_type must look like t3.micro."
  }
}

variable "root_volume_size_gb" {
  description = "Size of the encrypted gp3 root volume in GiB, at least the image's root snapshot; null: the image's own size (8 GiB at the least)."
  type        = number
  default     = null

  validation {
    condition     = var.root_volume_size_gb == null ? true : var.root_volume_size_gb >= 8 && var.root_volume_size_gb <= 16384
    error_message = "The root_volume_size_gb must be between 8 and 16384 GiB (gp3 limits), or null."
  }
}

variable "key_name" {
  description = "Key pair installed for the login user (the cluster's own)."
  type        = string
  nullable    = false
}

variable "ssh_ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach the bastion's TCP 22; never the whole internet."
  type        = list(string)
  nullable    = false

  validation {
    condition     = length(var.ssh_ingress_cidrs) > 0
    error_message = "The bastion needs ssh_ingress_cidrs: give the CIDR blocks allowed to reach port 22 (for example your address as x.x.x.x/32)."
  }

  validation {
    condition     = alltrue([for cidr in var.ssh_ingress_cidrs : can(cidrhost(cidr, 0)) && !can(regex(":", cidr)) && cidr != "0.0.0.0/0"])
    error_message = "Every entry of ssh_ingress_cidrs must be an IPv4 CIDR block narrower than 0.0.0.0/0, such as 203.0.113.7/32."
  }
}

variable "tags" {
  description = "Tags for every resource; the Name tag set by this module wins over a Name given here."
  type        = map(string)
  default     = {}
  nullable    = false
}
