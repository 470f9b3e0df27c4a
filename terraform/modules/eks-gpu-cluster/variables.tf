variable "cluster_id" {
  description = "Meridian cluster id (metadata.name of the agent's Cluster spec), e.g. aws-use1."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$", var.cluster_id))
    error_message = "cluster_id: lowercase letters, digits and '-', at most 32 characters."
  }
}

variable "region" {
  description = "AWS region of the cluster, e.g. us-east-1 (the Cluster spec's region)."
  type        = string
  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region: an AWS region such as us-east-1."
  }
}

variable "zone" {
  description = "Default availability zone of the pools (the Cluster spec's zone); empty: any of the subnets'."
  type        = string
  default     = ""
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version (major.minor)."
  type        = string
  default     = "1.31"
  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version: major.minor such as 1.31."
  }
}

variable "subnet_ids" {
  description = "Private subnets of the cluster and its nodes (at least two availability zones, as EKS requires)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids: at least two subnet ids (subnet-...) in different availability zones."
  }
}

variable "endpoint_public_access_cidrs" {
  description = "CIDRs allowed to reach the Kubernetes API from the internet; empty (default): private endpoint only (run Terraform from inside the VPC)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.endpoint_public_access_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "endpoint_public_access_cidrs: CIDR blocks, never 0.0.0.0/0."
  }
}

variable "system_instance_type" {
  description = "Instance type of the small on-demand node group that runs the agent, CoreDNS and the device plugin (no GPU)."
  type        = string
  default     = "m6i.large"
}

variable "system_nodes" {
  description = "Nodes of the system node group."
  type        = number
  default     = 2
  validation {
    condition     = var.system_nodes >= 1 && var.system_nodes <= 10
    error_message = "system_nodes: between 1 and 10."
  }
}

variable "pools" {
  description = "GPU pools, as in the Cluster spec's pools: name, instance_type, tier (on_demand, spot, reserved), min_nodes, max_nodes, optional zone and root volume size."
  type = list(object({
    name            = string
    instance_type   = string
    tier            = optional(string, "on_demand")
    min_nodes       = optional(number, 0)
    max_nodes       = number
    zone            = optional(string, "")
    root_volume_gib = optional(number, 200)
  }))
  validation {
    condition     = length(var.pools) > 0 && length(distinct([for p in var.pools : p.name])) == length(var.pools)
    error_message = "pools: at least one, with unique names."
  }
  validation {
    condition     = alltrue([for p in var.pools : contains(["on_demand", "spot", "reserved"], p.tier)])
    error_message = "pools[].tier: one of on_demand, spot, reserved."
  }
  validation {
    condition     = alltrue([for p in var.pools : p.min_nodes >= 0 && p.max_nodes >= 1 && p.min_nodes <= p.max_nodes])
    error_message = "pools[]: 0 <= min_nodes <= max_nodes and max_nodes >= 1."
  }
}

variable "scheduler_address" {
  description = "host:port of the Meridian scheduler's gRPC endpoint the agent dials (TLS)."
  type        = string
  validation {
    condition     = can(regex("^[^\\s:]+:[0-9]{1,5}$", var.scheduler_address))
    error_message = "scheduler_address: host:port, e.g. scheduler.meridian.example.com:7070."
  }
}

variable "scheduler_ca_pem" {
  description = "PEM CA bundle that signs the scheduler's certificate (the control plane module's ca_pem output); public data."
  type        = string
  validation {
    condition     = can(regex("-----BEGIN CERTIFICATE-----", var.scheduler_ca_pem))
    error_message = "scheduler_ca_pem: a PEM certificate bundle."
  }
}

variable "token_secret_arn" {
  description = "ARN of the AWS Secrets Manager secret holding this cluster's agent token (its SecretString is the token). The value is read at apply time, never passed as a variable."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$", var.token_secret_arn))
    error_message = "token_secret_arn: a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME)."
  }
}

variable "agent_image" {
  description = "Control-plane image that runs `meridian agent` (repository:tag or @digest), as built from deploy/images/."
  type        = string
}

variable "replica_image" {
  description = "Replica image (runtime adapter + SGLang) the agent runs GPU pods from."
  type        = string
}

variable "manifests_path" {
  description = "Path to the repository's deploy/kubernetes directory (this module applies its overlays/agent-eks)."
  type        = string
}

variable "namespace" {
  description = "Kubernetes namespace of the agent and its replica pods."
  type        = string
  default     = "meridian"
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "namespace: a DNS-1123 label."
  }
}

variable "node_termination_handler_version" {
  description = "Chart version of aws-node-termination-handler (spot notices -> cordon + taint, which the agent watches)."
  type        = string
  default     = "0.21.0"
}

variable "device_plugin_version" {
  description = "Chart version of the NVIDIA device plugin (advertises nvidia.com/gpu)."
  type        = string
  default     = "0.17.0"
}

variable "tags" {
  description = "Extra tags for every AWS resource."
  type        = map(string)
  default     = {}
}

variable "router_cidrs" {
  description = "Source CIDRs of the routers outside this cluster (other clusters, other clouds) that reach its replicas: the replicas' NetworkPolicy admits them on the engine and TLS ports. Empty: the routers of this cluster only."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.router_cidrs : can(cidrhost(c, 0))])
    error_message = "router_cidrs: CIDR blocks, e.g. 198.51.100.0/24."
  }
}
