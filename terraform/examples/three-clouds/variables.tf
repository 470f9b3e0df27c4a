variable "control_plane_image" {
  description = "Control-plane image pushed by the install step (meridian scheduler, router, agent), repository:tag."
  type        = string
}

variable "replica_image" {
  description = "Replica image (runtime adapter + SGLang) pushed by the install step."
  type        = string
}

variable "scheduler_hostname" {
  description = "DNS name of the scheduler's gRPC endpoint, e.g. scheduler.meridian.example.com."
  type        = string
}

variable "endpoint_domain" {
  description = "Domain of the client endpoints: <client region>.<domain>, e.g. meridian.example.com."
  type        = string
}

variable "router_certificate_issuer" {
  description = "cert-manager ClusterIssuer on the router clusters for the public endpoint certificates; it and cert-manager must exist on each router cluster before the apply (docs/operations.md, Install)."
  type        = string
  default     = "letsencrypt"
}

variable "admin_token_secret_arn" {
  description = "Secrets Manager (us-east-1) secret of the admin token."
  type        = string
}

variable "router_token_secret_arns" {
  description = "Secrets Manager secrets of the router tokens of the AWS-hosted router regions (na-east, eu-west)."
  type        = map(string)
}

variable "aws_vpc_ids" {
  description = "VPC of each EKS cluster, by Meridian cluster id."
  type        = map(string)
}

variable "aws_subnet_ids" {
  description = "Private subnets of each EKS cluster, by Meridian cluster id."
  type        = map(list(string))
}

variable "aws_cluster_security_group_ids" {
  description = "Cluster security group of each EKS cluster (after the first apply: module output), by cluster id."
  type        = map(string)
}

variable "aws_token_secret_arns" {
  description = "Secrets Manager secret of each EKS cluster's agent token, by cluster id."
  type        = map(string)
}

variable "gcp_project" {
  description = "GCP project of the GKE clusters (agent tokens are its Secret Manager secrets meridian-token-<cluster id>)."
  type        = string
}

variable "gcp_networks" {
  description = "Network and subnetwork of each GKE cluster, by cluster id."
  type        = map(object({ network = string, subnetwork = string }))
}

variable "azure_subscription_id" {
  description = "Azure subscription of the AKS clusters."
  type        = string
}

variable "azure_resource_group" {
  description = "Resource group of the AKS clusters."
  type        = string
}

variable "azure_subnet_ids" {
  description = "Node subnet of each AKS cluster, by cluster id."
  type        = map(string)
}

variable "azure_log_analytics_workspace_id" {
  description = "Log Analytics workspace of the AKS clusters."
  type        = string
}

variable "azure_disk_encryption_set_id" {
  description = "Disk encryption set of the AKS nodes."
  type        = string
}

variable "azure_key_vault_id" {
  description = "Key Vault of the AKS clusters' agent tokens (secrets meridian-token-<cluster id>)."
  type        = string
}
