variable "cluster_id" {
  description = "Meridian cluster id (metadata.name of the agent's Cluster spec), e.g. azure-eus2."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}[a-z0-9]$", var.cluster_id))
    error_message = "cluster_id: starts with a letter; lowercase letters, digits and '-', at most 32 characters."
  }
}

variable "resource_group_name" {
  description = "Resource group of the AKS cluster (AKS puts the nodes in a node resource group of its own)."
  type        = string
}

variable "location" {
  description = "Azure region, e.g. eastus2 (the Cluster spec's region)."
  type        = string
  validation {
    condition     = can(regex("^[a-z]+[0-9]?$", var.location))
    error_message = "location: an Azure region name such as eastus2."
  }
}

variable "zone" {
  description = "Availability zone of the GPU pools (the Cluster spec's zone): \"1\", \"2\" or \"3\"."
  type        = string
  default     = "1"
  validation {
    condition     = contains(["1", "2", "3"], var.zone)
    error_message = "zone: \"1\", \"2\" or \"3\"."
  }
}

variable "kubernetes_version" {
  description = "AKS Kubernetes version (major.minor); patches follow the automatic upgrade channel."
  type        = string
  default     = "1.31"
  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version: major.minor such as 1.31."
  }
}

variable "subnet_id" {
  description = "Subnet of the nodes (Azure CNI overlay)."
  type        = string
}

variable "api_server_authorized_ip_ranges" {
  description = "CIDRs allowed to reach the Kubernetes API (where Terraform and operators run); the API server is otherwise private."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.api_server_authorized_ip_ranges : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "api_server_authorized_ip_ranges: CIDR blocks, never 0.0.0.0/0."
  }
}

variable "log_analytics_workspace_id" {
  description = "Log Analytics workspace for the cluster's monitoring agent."
  type        = string
}

variable "disk_encryption_set_id" {
  description = "Disk encryption set (customer-managed key) of the nodes' OS and data disks."
  type        = string
}

variable "system_vm_size" {
  description = "VM size of the system pool (the agent, kube-system), no GPU."
  type        = string
  default     = "Standard_D4ds_v5"
}

variable "pools" {
  description = "GPU node pools, as in the Cluster spec's pools: name (<= 12 lowercase alphanumerics, an AKS rule), VM size (instance_type), tier (on_demand, spot, reserved), min_nodes, max_nodes."
  type = list(object({
    name           = string
    instance_type  = string
    tier           = optional(string, "on_demand")
    min_nodes      = optional(number, 0)
    max_nodes      = number
    spot_max_price = optional(number, -1)
  }))
  validation {
    condition     = length(var.pools) > 0 && length(distinct([for p in var.pools : replace(p.name, "-", "")])) == length(var.pools)
    error_message = "pools: at least one, with unique names, also once '-' is dropped (the AKS agent pool names)."
  }
  validation {
    condition     = alltrue([for p in var.pools : can(regex("^[a-z][a-z0-9]{0,11}$", replace(p.name, "-", "")))])
    error_message = "pools[].name: AKS pool names are at most 12 lowercase letters and digits ('-' is dropped)."
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
    error_message = "scheduler_address: host:port."
  }
}

variable "scheduler_ca_pem" {
  description = "PEM CA bundle that signs the scheduler's certificate (public data)."
  type        = string
  validation {
    condition     = can(regex("-----BEGIN CERTIFICATE-----", var.scheduler_ca_pem))
    error_message = "scheduler_ca_pem: a PEM certificate bundle."
  }
}

variable "key_vault_id" {
  description = "Azure Key Vault holding this cluster's agent token."
  type        = string
}

variable "token_secret_name" {
  description = "Name of the Key Vault secret whose value is this cluster's agent token; read at apply time, never passed as a variable."
  type        = string
  validation {
    condition     = can(regex("^[0-9A-Za-z-]{1,127}$", var.token_secret_name))
    error_message = "token_secret_name: a Key Vault secret name (letters, digits, '-')."
  }
}

variable "agent_image" {
  description = "Control-plane image that runs `meridian agent` (repository:tag or @digest)."
  type        = string
}

variable "replica_image" {
  description = "Replica image (runtime adapter + SGLang) the agent runs GPU pods from."
  type        = string
}

variable "manifests_path" {
  description = "Path to the repository's deploy/kubernetes directory (this module applies its overlays/agent-aks)."
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

variable "device_plugin_version" {
  description = "Chart version of the NVIDIA device plugin (AKS installs the driver on GPU pools; the plugin advertises nvidia.com/gpu)."
  type        = string
  default     = "0.17.0"
}

variable "tags" {
  description = "Extra tags for every Azure resource."
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
