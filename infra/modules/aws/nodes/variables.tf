variable "name" {
  description = "Cluster name; nodes are tagged \"<name>-node-<index>\"."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$", var.name))
    error_message = "The name must be 1-40 characters of lower-case letters, digits and '-', starting with a letter and not ending with '-'."
  }
}

variable "node_count" {
  description = "Number of nodes; they are named node-0 .. node-<n-1>."
  type        = number
  nullable    = false

  # Not capped here: every node takes one fixed address of the subnet (validated where the
  # subnet is known, below and in skyinfra/targets/aws/render.py); the vCPU and Elastic IP
  # quotas are the account's (checked by skyinfra's preflight).
  validation {
    condition     = var.node_count >= 1 && floor(var.node_count) == var.node_count
    error_message = "The node_count must be a whole number >= 1."
  }
}

variable "instance_type" {
  description = "EC2 instance type of every node, for example p4d.24xlarge."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "The instance_type must look like family.size, for example g5.xlarge or p4d.24xlarge."
  }
}

variable "ami_id" {
  description = "Concrete AMI id (resolved once by the operator, so a new AMI release never shows up as a replacement)."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "The ami_id must be a concrete AMI id such as ami-0123456789abcdef0, not an SSM parameter path."
  }
}

variable "subnet_id" {
  description = "Subnet the nodes are placed in."
  type        = string
  nullable    = false
}

variable "subnet_cidr_block" {
  description = "IPv4 CIDR block of subnet_id; node i gets the address cidrhost(subnet_cidr_block, private_ip_host_offset + i)."
  type        = string
  nullable    = false

  validation {
    condition     = can(cidrhost(var.subnet_cidr_block, 0)) && !can(regex(":", var.subnet_cidr_block))
    error_message = "The subnet_cidr_block must be an IPv4 CIDR block such as 10.42.0.0/24."
  }
}

variable "private_ip_host_offset" {
  description = "Host number of node-0's private address inside the subnet."
  type        = number
  default     = 10
  nullable    = false

  # AWS reserves the first four addresses (network, VPC router, DNS, future use) and the
  # last one of every subnet: https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html
  validation {
    condition     = var.private_ip_host_offset >= 4 && floor(var.private_ip_host_offset) == var.private_ip_host_offset
    error_message = "The private_ip_host_offset must be a whole number >= 4: AWS reserves the first four addresses of every subnet."
  }

  # The last node's address must stay below the subnet's last address (AWS reserves it).
  validation {
    condition     = var.private_ip_host_offset + var.node_count <= pow(2, 32 - tonumber(split("/", var.subnet_cidr_block)[1])) - 1
    error_message = "The subnet is too small: node i takes host private_ip_host_offset + i, and AWS reserves the subnet's last address. Use a larger subnet or fewer nodes."
  }
}

variable "security_group_ids" {
  description = "Security groups of every node (and of every EFA interface)."
  type        = list(string)
  nullable    = false

  validation {
    condition     = length(var.security_group_ids) > 0
    error_message = "Give at least one security group id."
  }
}

variable "ssh_public_key" {
  description = "OpenSSH public key installed for the AMI's default user (an aws_key_pair is created from it)."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+", var.ssh_public_key))
    error_message = "The ssh_public_key must be one OpenSSH public key line (ssh-ed25519 AAAA..., ssh-rsa AAAA... or ecdsa-sha2-...)."
  }
}

variable "root_volume_size_gb" {
  description = "Size of the encrypted gp3 root volume in GiB (Deep Learning AMIs need at least 100)."
  type        = number
  default     = 200
  nullable    = false

  validation {
    condition     = var.root_volume_size_gb >= 8 && var.root_volume_size_gb <= 16384
    error_message = "The root_volume_size_gb must be between 8 and 16384 GiB (gp3 limits)."
  }
}

variable "associate_public_ip_address" {
  description = "Give each node a public IPv4 address: the subnet's auto-assigned one without EFA; with EFA an Elastic IP on the card-0 interface (AWS assigns no public address to instances launched with existing or several interfaces)."
  type        = bool
  default     = true
  nullable    = false
}

variable "public_nodes" {
  description = "Only these nodes (by name, node-0 ...) get a public address, whatever associate_public_ip_address says; null: every node follows associate_public_ip_address."
  type        = list(string)
  default     = null

  validation {
    condition     = alltrue([for node in(var.public_nodes == null ? [] : var.public_nodes) : can(regex("^node-[0-9]+$", node))])
    error_message = "Every entry of public_nodes must be a node name such as node-0."
  }
}

variable "placement_group_enabled" {
  description = "Create a cluster placement group and launch every node into it (low-latency, same rack)."
  type        = bool
  default     = false
  nullable    = false
}

variable "efa_interface_count" {
  description = "Number of EFA interfaces per node, one per network card; 0 turns EFA off. Use the instance type's maximum (DescribeInstanceTypes NetworkInfo.EfaInfo.MaximumEfaInterfaces), as AWS documents for each type."
  type        = number
  default     = 0
  nullable    = false

  validation {
    condition     = var.efa_interface_count >= 0 && var.efa_interface_count <= 32 && floor(var.efa_interface_count) == var.efa_interface_count
    error_message = "The efa_interface_count must be a whole number from 0 (EFA off) to 32."
  }
}

variable "user_data" {
  description = "Per-node user data keyed by node name: exactly one of text (plain #cloud-config, under 16 KB) or base64 (for gzip-compressed data)."
  type = map(object({
    text   = optional(string)
    base64 = optional(string)
  }))
  default  = {}
  nullable = false

  validation {
    condition     = alltrue([for node, data in var.user_data : (data.text == null) != (data.base64 == null)])
    error_message = "Each user_data entry must set exactly one of text or base64."
  }

  # EC2 limits user data to 16 KB before base64 encoding:
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html
  validation {
    # A base64 entry has no text: length(null) fails and try() passes it (Terraform 1.11
    # evaluates both sides of ||, 1.15 does not: `text == null || length(...)` failed on 1.11).
    condition     = alltrue([for node, data in var.user_data : try(length(data.text) <= 16384, true)])
    error_message = "A user_data text entry is over EC2's 16 KB limit: gzip it and pass it as base64."
  }
}

variable "instance_profile_policy_arns" {
  description = "Managed policies attached to the nodes' role. Empty by default: the only permission nodes need is reading their staged objects (staged_read)."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "staged_read" {
  description = "S3 objects the nodes' role may read (s3:GetObject on bucket/prefix*, and bucket/wheelhouse* when set): where skyinfra staged the runtime wheel and a private network's wheelhouse, fetched by the node with its role so that no credential is in the user data. null: none."
  type = object({
    bucket     = string
    prefix     = string
    wheelhouse = optional(string)
  })
  default = null
}

variable "checkpoints" {
  description = "The S3 prefix the nodes keep checkpoints under (s3:ListBucket on the bucket for keys under prefix/, s3:GetObject, s3:PutObject and s3:DeleteObject on bucket/prefix/*). The prefix has no leading or trailing '/' and no wildcard. null: none."
  type = object({
    bucket = string
    prefix = string
  })
  default = null

  validation {
    condition     = var.checkpoints == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.checkpoints.bucket))
    error_message = "checkpoints.bucket must be an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit."
  }

  validation {
    condition     = var.checkpoints == null || can(regex("^[A-Za-z0-9_.=+-]+(/[A-Za-z0-9_.=+-]+)*$", var.checkpoints.prefix))
    error_message = "checkpoints.prefix must be path segments of letters, digits and _.=+- joined by '/', without a leading or trailing '/' or a wildcard (* or ?), which would widen the nodes' access."
  }

  validation {
    condition     = var.checkpoints == null || !contains(split("/", var.checkpoints.prefix), "..")
    error_message = "checkpoints.prefix must not have a '..' segment."
  }
}

variable "tags" {
  description = "Tags for every resource (lowest precedence)."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "instance_tags" {
  description = "Extra tags for the instances only; override tags, are overridden by the Name and skyinfra:* tags this module sets."
  type        = map(string)
  default     = {}
  nullable    = false
}

variable "detailed_monitoring" {
  description = "Enable 1-minute CloudWatch detailed monitoring (billed per instance; basic 5-minute monitoring is always on)."
  type        = bool
  default     = false
  nullable    = false
}

# Capacity (issue 13)
variable "capacity_reservation" {
  description = "Capacity reservation the nodes launch into (an On-Demand Capacity Reservation, or a Capacity Block with capacity_block = true), or null for none."
  type = object({
    id             = string
    capacity_block = bool
  })
  default = null

  validation {
    condition     = var.capacity_reservation == null || can(regex("^cr-[0-9a-f]{8,17}$", var.capacity_reservation.id))
    error_message = "The capacity_reservation id must look like cr-0123456789abcdef0."
  }
}

# Spot (issue 26)
variable "node_markets" {
  description = "How each node is bought, keyed by node name (node-0, node-1, ...): \"on-demand\" or \"spot\". A node not named is On-Demand."
  type        = map(string)
  default     = {}
  nullable    = false

  validation {
    condition     = alltrue([for market in values(var.node_markets) : contains(["on-demand", "spot"], market)])
    error_message = "Each node_markets value must be \"on-demand\" or \"spot\"."
  }

  validation {
    condition     = alltrue([for node in keys(var.node_markets) : can(regex("^node-[0-9]+$", node)) && tonumber(trimprefix(node, "node-")) < var.node_count])
    error_message = "Each node_markets key must be the name of one of the nodes: node-0 .. node-<node_count - 1>."
  }

  # A capacity reservation holds On-Demand capacity, and a Capacity Block has its own market
  # type (capacity-block): a Spot instance can use neither.
  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-using.html
  validation {
    condition     = var.capacity_reservation == null || !contains(values(var.node_markets), "spot")
    error_message = "Spot nodes cannot launch into a capacity reservation: make every node \"on-demand\", or drop capacity_reservation."
  }
}

variable "spot_max_price" {
  description = "The highest price per instance-hour, in USD, the Spot nodes may cost; null: AWS's default cap, the On-Demand price."
  type        = number
  default     = null

  validation {
    condition     = var.spot_max_price == null || try(var.spot_max_price > 0, false)
    error_message = "The spot_max_price must be above 0 (USD per instance-hour), or null for the On-Demand price."
  }
}

# Unattended recovery (issue 26, aws.recover)
variable "head_recovery" {
  description = "Unattended recovery (aws.recover): the cluster's Terraform state in S3, which node-0 (the head) reads and writes to re-create lost or interrupted nodes. With it node-0 gets a role of its own (<name>-head): the node role's permissions plus the inline policy <name>-recover, limited to this cluster (the state object, its lock object, and launching instances tagged skyinfra:cluster = <name>). state_key is the state object's key (<prefix>/<cluster>/terraform.tfstate), lock_key Terraform's S3 lock object beside it (<state_key>.tflock, use_lockfile). null: off, and node-0 uses the node role like every node."
  type = object({
    bucket    = string
    state_key = string
    lock_key  = string
  })
  default = null

  validation {
    condition     = var.head_recovery == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.head_recovery.bucket))
    error_message = "head_recovery.bucket must be an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit."
  }

  # The key becomes part of IAM resource ARNs and of an s3:prefix condition: a wildcard (* or ?)
  # or a policy variable ($) would widen the head's access beyond this cluster's state.
  validation {
    condition     = var.head_recovery == null || can(regex("^[A-Za-z0-9!_.'()=+-]+(/[A-Za-z0-9!_.'()=+-]+)+$", var.head_recovery.state_key))
    error_message = "head_recovery.state_key must be a state object's key in a folder (<prefix>/<cluster>/terraform.tfstate): path segments of letters, digits and !_.'()=+- joined by '/', without a leading or trailing '/' or a wildcard (* or ?), which would widen the head's access."
  }

  validation {
    condition     = var.head_recovery == null || !contains(split("/", try(var.head_recovery.state_key, "")), "..")
    error_message = "head_recovery.state_key must not have a '..' segment."
  }

  validation {
    condition     = var.head_recovery == null || try(var.head_recovery.lock_key == "${var.head_recovery.state_key}.tflock", false)
    error_message = "head_recovery.lock_key must be the state key followed by .tflock: Terraform's S3 lock object (use_lockfile = true) lies beside the state."
  }
}
