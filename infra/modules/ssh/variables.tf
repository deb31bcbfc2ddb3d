variable "cluster_name" {
  description = "Cluster name; prefixes node ids (ssh-<cluster>-<index>)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$", var.cluster_name))
    error_message = "cluster_name must be 1-32 lower-case letters, digits or '-', starting with a letter and not ending with '-'."
  }
}

variable "hosts" {
  description = "The enrolled machines keyed by node name (node-0 first): where the operator dials, the address the nodes reach each other on, the node's folder under the login user's home, the host key pinned at first contact, and its GPUs counted then (nvidia-smi -L; 0 and \"\" without)."
  type = map(object({
    index           = number
    host            = string
    private_address = string
    node_dir        = string
    host_key        = string
    gpus            = number
    gpu_type        = string
  }))

  validation {
    condition     = alltrue([for h in values(var.hosts) : startswith(h.node_dir, "/") && h.host_key != ""])
    error_message = "every host needs an absolute node_dir and a pinned host_key."
  }
}

variable "user" {
  description = "The unprivileged login user on every host."
  type        = string

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_.-]{0,31}$", var.user)) && var.user != "root"
    error_message = "user must be a login name other than root."
  }
}

variable "port" {
  description = "The hosts' SSH port."
  type        = number
  default     = 22

  validation {
    condition     = var.port >= 1 && var.port <= 65535 && floor(var.port) == var.port
    error_message = "port must be a whole number from 1 to 65535."
  }
}

variable "private_key_path" {
  description = "The operator's private key file (read here; never copied to a host)."
  type        = string
}

variable "head_port" {
  description = "Base coordination port on node 0 (jax on head_port, torch on head_port + 1)."
  type        = number
  default     = 29500

  validation {
    condition     = var.head_port >= 1024 && var.head_port <= 65534
    error_message = "head_port must be from 1024 to 65534."
  }
}

variable "python" {
  description = "The interpreter on each host the node's venv is made from (name on PATH or absolute path; 3.10+)."
  type        = string
  default     = "python3"
}

variable "stage_dir" {
  description = "Folder of the root module holding, per node, the tree copied into the login user's home first (.skyinfra/<cluster>/node-<i>/.enrol/ with the bootstrap and the node check)."
  type        = string
}

variable "wheel_path" {
  description = "Path (on the operator's machine) of the skyinfra-runtime wheel copied to every host; its folder holds only it and uv_path, and is copied whole."
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

variable "uv_path" {
  description = "Path (on the operator's machine) of the uv binary copied into each node's folder; the node's venv is made with it. Named uv, beside wheel_path."
  type        = string
}

variable "python_packages" {
  description = "Extra pip requirements installed on every node."
  type        = list(string)
  default     = []
}
