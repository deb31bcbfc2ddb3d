variable "cluster_name" {
  description = "Cluster name; prefixes node ids (local-<cluster>-<index>)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", var.cluster_name))
    error_message = "cluster_name must be 1-32 lower-case letters, digits or '-', starting with a letter and not ending with '-'."
  }
}

variable "node_count" {
  description = "Number of local nodes."
  type        = number

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 32 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 32."
  }
}

variable "base_address" {
  description = "Loopback address of node 0; node i gets base_address + i."
  type        = string
  default     = "127.0.0.2"

  validation {
    condition     = can(cidrhost("${var.base_address}/32", 0)) && startswith(var.base_address, "127.")
    error_message = "base_address must be an IPv4 address in 127.0.0.0/8."
  }
}

variable "head_port" {
  description = "Base coordination port on the head node (jax on head_port, torch on head_port + 1)."
  type        = number
  default     = 29500

  validation {
    condition     = var.head_port >= 1024 && var.head_port <= 65534
    error_message = "head_port must be from 1024 to 65534."
  }
}

variable "node_root" {
  description = "Absolute directory under which each node gets its own directory."
  type        = string

  validation {
    condition     = startswith(var.node_root, "/")
    error_message = "node_root must be an absolute path."
  }
}

variable "python" {
  description = "Absolute path of the Python interpreter the node virtual environments are made from."
  type        = string

  validation {
    condition     = startswith(var.python, "/")
    error_message = "python must be an absolute path."
  }
}

variable "inherit_site_packages" {
  description = "Let node environments see the site-packages of var.python (jax, keras, torch are not installed again)."
  type        = bool
  default     = true
}

variable "bootstrap_script" {
  description = "Path of the node bootstrap script (skyinfra ships infra/scripts/bootstrap-node.sh; the root module keeps a copy beside it)."
  type        = string

  validation {
    condition     = fileexists(var.bootstrap_script)
    error_message = "bootstrap_script must name an existing file."
  }
}

variable "wheel_path" {
  description = "Absolute path of the skyinfra-runtime wheel installed on every node."
  type        = string

  validation {
    condition     = endswith(var.wheel_path, ".whl")
    error_message = "wheel_path must name a .whl file."
  }
}

variable "wheel_sha256" {
  description = "Content hash of the runtime wheel; a new wheel replaces the nodes."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.wheel_sha256))
    error_message = "wheel_sha256 must be 64 lowercase hex digits."
  }
}

variable "python_packages" {
  description = "Extra pip requirements installed on every node."
  type        = list(string)
  default     = []
}

variable "uv" {
  description = "Path of the uv binary the node bootstrap installs with; empty: pip (slower; the node log says so)."
  type        = string
  default     = ""
}

variable "uv_cache_dir" {
  description = "uv's package cache, shared by every node of the cluster (empty: uv's default)."
  type        = string
  default     = ""
}
