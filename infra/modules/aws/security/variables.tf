variable "name" {
  description = "Cluster name; the security group is called \"<name>-nodes\"."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$", var.name))
    error_message = "The name must be 1-40 characters of lower-case letters, digits and '-', starting with a letter and not ending with '-'."
  }
}

variable "vpc_id" {
  description = "VPC the security group belongs to."
  type        = string
  nullable    = false
}

variable "enable_ssh" {
  description = "Open TCP 22 to ssh_ingress_cidrs (the operator reaches the nodes over SSH)."
  type        = bool
  default     = true
  nullable    = false
}

variable "ssh_ingress_cidrs" {
  description = "IPv4 CIDR blocks allowed to reach TCP 22. There is no default: name your own address (for example 203.0.113.7/32)."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for cidr in var.ssh_ingress_cidrs : can(cidrhost(cidr, 0)) && !can(regex(":", cidr))])
    error_message = "Every entry of ssh_ingress_cidrs must be an IPv4 CIDR block such as 203.0.113.7/32."
  }

  # Refuse to render a public SSH rule without CIDRs rather than silently opening nothing
  # (or, worse, everything).
  validation {
    condition     = !var.enable_ssh || length(var.ssh_ingress_cidrs) > 0
    error_message = "SSH is enabled but ssh_ingress_cidrs is empty: give the CIDR blocks allowed to reach port 22 (for example your address as x.x.x.x/32), or set enable_ssh = false."
  }

  validation {
    condition     = var.allow_ssh_from_anywhere || !contains(var.ssh_ingress_cidrs, "0.0.0.0/0")
    error_message = "ssh_ingress_cidrs contains 0.0.0.0/0, which opens SSH to the whole internet; give narrower CIDR blocks, or set allow_ssh_from_anywhere = true to accept that explicitly."
  }
}

variable "allow_ssh_from_anywhere" {
  description = "Explicit opt-in that lets ssh_ingress_cidrs contain 0.0.0.0/0."
  type        = bool
  default     = false
  nullable    = false
}

variable "egress_cidrs" {
  description = "IPv4 CIDR blocks the nodes may open connections to (besides each other). Nodes download the runtime wheel from S3 and packages from PyPI at boot, so the default is the internet; a private network without NAT gives its VPC block only."
  type        = list(string)
  default     = ["0.0.0.0/0"]
  nullable    = false

  validation {
    condition     = alltrue([for cidr in var.egress_cidrs : can(cidrhost(cidr, 0)) && !can(regex(":", cidr))])
    error_message = "Every entry of egress_cidrs must be an IPv4 CIDR block such as 0.0.0.0/0 or 10.0.0.0/8."
  }
}

variable "tags" {
  description = "Tags for every resource; the Name tag set by this module wins over a Name given here."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "ssh_source_security_group_ids" {
  description = "Security groups allowed to reach TCP 22 of the nodes (a private network's bastion)."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "egress_prefix_list_ids" {
  description = "Managed prefix lists the nodes may reach on HTTPS (a private network's S3 gateway endpoint)."
  type        = list(string)
  default     = []
  nullable    = false
}
