variable "client_region" {
  description = "Client region these routers serve (a latency-map region, e.g. na-east); the router's --region."
  type        = string
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+$", var.client_region))
    error_message = "client_region: a latency-map region such as na-east or eu-west."
  }
}

variable "replicas" {
  description = "Router pods behind the region's load balancer."
  type        = number
  default     = 2
  validation {
    condition     = var.replicas >= 1 && var.replicas <= 50
    error_message = "replicas: between 1 and 50."
  }
}

variable "image" {
  description = "Control-plane image (repository:tag or @digest)."
  type        = string
}

variable "namespace" {
  description = "Namespace of the routers."
  type        = string
  default     = "meridian-edge"
  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "namespace: a DNS-1123 label."
  }
}

variable "hostname" {
  description = "Public DNS name of this region's endpoint (in the router certificate; point it at the Service's load balancer)."
  type        = string
}

variable "certificate_issuer" {
  description = "cert-manager ClusterIssuer of the router certificate on this cluster (e.g. an ACME issuer for a public name)."
  type        = string
}

variable "scheduler_address" {
  description = "host:port of the scheduler's gRPC endpoint."
  type        = string
}

variable "scheduler_ca_pem" {
  description = "PEM CA bundle of the scheduler's certificate (public data)."
  type        = string
}

variable "router_token_secret" {
  description = "Name of the Kubernetes Secret (key token) in the namespace that holds the router token; the caller creates it from its cloud's secret store."
  type        = string
  default     = "meridian-router-token"
}

variable "load_balancer_annotations" {
  description = "Annotations of the router Service for this cloud's regional L4 load balancer (e.g. the AWS NLB ones, GKE's or AKS's)."
  type        = map(string)
  default     = {}
}

variable "manifests_path" {
  description = "Path to the repository's deploy/kubernetes directory (this module applies its overlays/router)."
  type        = string
}
