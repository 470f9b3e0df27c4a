variable "cluster_id" {
  description = "Meridian cluster id (metadata.name of the agent's Cluster spec), e.g. gcp-usc1."
  type        = string
  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,20}[a-z0-9])?$", var.cluster_id))
    error_message = "cluster_id: starts with a letter; lowercase letters, digits and '-', at most 22 characters (GKE and service account names are built from it)."
  }
}

variable "project" {
  description = "GCP project id of the cluster."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project: a GCP project id."
  }
}

variable "region" {
  description = "GCP region, e.g. us-central1 (the Cluster spec's region)."
  type        = string
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region: a GCP region such as us-central1."
  }
}

variable "zone" {
  description = "Zone of the GPU node pools (the Cluster spec's zone), e.g. us-central1-a; GPUs are zonal."
  type        = string
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]-[a-z]$", var.zone))
    error_message = "zone: a GCP zone such as us-central1-a."
  }
}

variable "network" {
  description = "VPC network self link or name."
  type        = string
}

variable "subnetwork" {
  description = "Subnetwork (with secondary ranges named by pods_range_name and services_range_name)."
  type        = string
}

variable "pods_range_name" {
  description = "Secondary range of the subnetwork for pods (VPC-native cluster)."
  type        = string
  default     = "pods"
}

variable "services_range_name" {
  description = "Secondary range of the subnetwork for services."
  type        = string
  default     = "services"
}

variable "master_ipv4_cidr_block" {
  description = "/28 for the private control plane's endpoint."
  type        = string
  default     = "172.16.0.0/28"
  validation {
    condition     = can(cidrhost(var.master_ipv4_cidr_block, 0)) && endswith(var.master_ipv4_cidr_block, "/28")
    error_message = "master_ipv4_cidr_block: a /28 CIDR."
  }
}

variable "authorized_networks" {
  description = "CIDRs allowed to reach the Kubernetes API (where Terraform and operators run)."
  type        = list(object({ cidr = string, name = string }))
  default     = []
  validation {
    condition     = alltrue([for n in var.authorized_networks : can(cidrhost(n.cidr, 0)) && n.cidr != "0.0.0.0/0"])
    error_message = "authorized_networks[].cidr: CIDR blocks, never 0.0.0.0/0."
  }
}

variable "release_channel" {
  description = "GKE release channel."
  type        = string
  default     = "REGULAR"
  validation {
    condition     = contains(["RAPID", "REGULAR", "STABLE"], var.release_channel)
    error_message = "release_channel: RAPID, REGULAR or STABLE."
  }
}

variable "system_machine_type" {
  description = "Machine type of the small system pool (the agent, kube-system), no GPU."
  type        = string
  default     = "e2-standard-4"
}

variable "pools" {
  description = "GPU node pools, as in the Cluster spec's pools: name, machine type (instance_type), accelerator type and count, tier (on_demand, spot, reserved), min_nodes, max_nodes."
  type = list(object({
    name              = string
    instance_type     = string
    accelerator_type  = string
    accelerator_count = optional(number, 1)
    tier              = optional(string, "on_demand")
    min_nodes         = optional(number, 0)
    max_nodes         = number
    disk_size_gb      = optional(number, 200)
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
    condition     = alltrue([for p in var.pools : can(regex("^nvidia-", p.accelerator_type)) && p.accelerator_count >= 1])
    error_message = "pools[].accelerator_type: a GKE accelerator such as nvidia-l4 or nvidia-h100-80gb, with accelerator_count >= 1."
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

variable "token_secret_id" {
  description = "GCP Secret Manager secret holding this cluster's agent token (projects/P/secrets/NAME or NAME); read at apply time, never passed as a variable."
  type        = string
  validation {
    condition     = can(regex("^(projects/[^/]+/secrets/)?[A-Za-z0-9_-]{1,255}$", var.token_secret_id))
    error_message = "token_secret_id: a Secret Manager secret name or projects/P/secrets/NAME."
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
  description = "Path to the repository's deploy/kubernetes directory (this module applies its overlays/agent-gke)."
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

variable "labels" {
  description = "Extra labels for every GCP resource."
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
