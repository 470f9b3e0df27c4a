variable "cluster_id" {
  description = "Meridian cluster id (metadata.name of the Cluster spec); tagged meridian:cluster."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$", var.cluster_id))
    error_message = "cluster_id: lowercase letters, digits and '-', at most 42 characters (it is part of the group name)."
  }
}

variable "pool_name" {
  description = "Pool name as in the Cluster spec's pools[].name; tagged meridian:pool."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$", var.pool_name))
    error_message = "pool_name: lowercase letters, digits and '-', at most 32 characters."
  }
}

variable "group_name" {
  description = "Auto Scaling group name (the pool's `resource` in the Cluster spec); empty: meridian-<cluster_id>-<pool_name>."
  type        = string
  default     = ""
  validation {
    condition     = length(var.group_name) <= 255
    error_message = "group_name: at most 255 characters."
  }
}

variable "instance_type" {
  description = "GPU instance type, e.g. g6.xlarge or p5.48xlarge."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*[0-9][a-z0-9-]*\\.[0-9a-z]+$", var.instance_type))
    error_message = "instance_type: an EC2 instance type such as g6.xlarge."
  }
}

variable "tier" {
  description = "on_demand, spot or reserved (reserved: on-demand instances covered by a capacity reservation or savings plan)."
  type        = string
  default     = "on_demand"
  validation {
    condition     = contains(["on_demand", "spot", "reserved"], var.tier)
    error_message = "tier: one of on_demand, spot, reserved."
  }
}

variable "ami_id" {
  description = "AMI with the NVIDIA driver (e.g. the EKS-optimized accelerated AMI, or a Deep Learning AMI)."
  type        = string
  validation {
    condition     = can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id: an AMI id such as ami-0123456789abcdef0."
  }
}

variable "subnet_ids" {
  description = "Subnets (one per availability zone) the group may launch into."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) > 0 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids: at least one subnet id (subnet-...)."
  }
}

variable "security_group_ids" {
  description = "Security groups of the instances (for EKS nodes: the cluster security group)."
  type        = list(string)
  default     = []
}

variable "instance_profile_arn" {
  description = "IAM instance profile of the nodes (empty: none)."
  type        = string
  default     = ""
}

variable "user_data_base64" {
  description = "Base64 user data (for EKS nodes: the nodeadm NodeConfig that joins the cluster); empty: none."
  type        = string
  default     = ""
}

variable "root_volume_gib" {
  description = "Size of the encrypted root volume, GiB (model weights are cached on it)."
  type        = number
  default     = 200
  validation {
    condition     = var.root_volume_gib >= 50 && var.root_volume_gib <= 16384
    error_message = "root_volume_gib: between 50 and 16384."
  }
}

variable "min_nodes" {
  description = "Smallest size of the group (the Cluster spec's min_nodes)."
  type        = number
  default     = 0
  validation {
    condition     = var.min_nodes >= 0 && floor(var.min_nodes) == var.min_nodes
    error_message = "min_nodes: a whole number >= 0."
  }
}

variable "max_nodes" {
  description = "Largest size of the group (the Cluster spec's max_nodes); the agent resizes within it."
  type        = number
  default     = 4
  validation {
    condition     = var.max_nodes >= 1 && floor(var.max_nodes) == var.max_nodes
    error_message = "max_nodes: a whole number >= 1."
  }
}

variable "tags" {
  description = "Extra tags for every resource."
  type        = map(string)
  default     = {}
}
