variable "name" {
  description = "Name of this Meridian fleet (prefix of the AWS resources)."
  type        = string
  default     = "meridian"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.name))
    error_message = "name: starts with a letter; lowercase letters, digits and '-', at most 31 characters."
  }
}

variable "namespace" {
  description = "Kubernetes namespace of the scheduler (on the EKS cluster that hosts the control plane)."
  type        = string
  default     = "meridian-system"
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "namespace: a DNS-1123 label."
  }
}

variable "scheduler_hostname" {
  description = "DNS name agents and routers dial (in the scheduler certificate's SAN), e.g. scheduler.meridian.example.com."
  type        = string
  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)+[a-z]{2,}$", var.scheduler_hostname))
    error_message = "scheduler_hostname: a DNS name."
  }
}

variable "scheduler_image" {
  description = "Control-plane image (meridian scheduler / router / agent), repository:tag or @digest."
  type        = string
}

variable "scheduler_replicas" {
  description = "Scheduler nodes (one leads, the others stand by; more than one needs Redis)."
  type        = number
  default     = 2
  validation {
    condition     = var.scheduler_replicas >= 1 && var.scheduler_replicas <= 5
    error_message = "scheduler_replicas: between 1 and 5."
  }
}

variable "redis_mode" {
  description = "Where the scheduler's state lives: elasticache (created here: TLS, auth token, Multi-AZ), in_cluster (the Redis of the control-plane overlay), or external (a rediss:// URL kept in redis_url_secret_arn, e.g. Memorystore or Azure Cache over a private link)."
  type        = string
  default     = "elasticache"
  validation {
    condition     = contains(["elasticache", "in_cluster", "external"], var.redis_mode)
    error_message = "redis_mode: elasticache, in_cluster or external."
  }
}

variable "redis_url_secret_arn" {
  description = "redis_mode = external: Secrets Manager secret whose value is the state URL (rediss://:PASSWORD@HOST:PORT/0)."
  type        = string
  default     = ""
}

variable "elasticache_node_type" {
  description = "redis_mode = elasticache: node type of the two-node replication group."
  type        = string
  default     = "cache.t4g.small"
}

variable "vpc_id" {
  description = "VPC of the control plane's EKS cluster (ElastiCache is placed in it)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for ElastiCache (two or more availability zones)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "subnet_ids: at least two subnets."
  }
}

variable "cluster_security_group_id" {
  description = "Security group of the EKS cluster's nodes: only it may reach Redis."
  type        = string
}

variable "admin_token_secret_arn" {
  description = "Secrets Manager secret holding the admin API token (the file --admin-token-file reads)."
  type        = string
}

variable "cluster_token_digests" {
  description = "Cluster id -> sha256:<hex> digest of its agent token (each GPU cluster module's agent_token_digest output): the tokens file's clusters."
  type        = map(string)
  sensitive   = true
  validation {
    condition     = length(var.cluster_token_digests) > 0 && alltrue([for d in values(var.cluster_token_digests) : can(regex("^sha256:[0-9a-f]{64}$", d))])
    error_message = "cluster_token_digests: at least one cluster, each value sha256: and 64 hex digits."
  }
}

variable "router_token_digests" {
  description = "sha256:<hex> digests of the router tokens (one per router region; old and new side by side while rotating): the tokens file's routers."
  type        = list(string)
  sensitive   = true
  validation {
    condition     = alltrue([for d in var.router_token_digests : can(regex("^sha256:[0-9a-f]{64}$", d))])
    error_message = "router_token_digests: each sha256: and 64 hex digits."
  }
}

variable "manifests_path" {
  description = "Path to the repository's deploy/kubernetes directory (this module applies its overlays/scheduler)."
  type        = string
}

variable "cert_manager_version" {
  description = "Chart version of cert-manager (issues the scheduler's and routers' certificates)."
  type        = string
  default     = "v1.16.2"
}

variable "tags" {
  description = "Extra tags for every AWS resource."
  type        = map(string)
  default     = {}
}
