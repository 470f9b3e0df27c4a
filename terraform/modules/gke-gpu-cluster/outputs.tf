output "cluster_name" {
  description = "GKE cluster name."
  value       = google_container_cluster.this.name
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint (private unless authorized_networks is set)."
  value       = google_container_cluster.this.endpoint
}

output "cluster_ca_certificate" {
  description = "Base64 PEM of the cluster's CA."
  value       = google_container_cluster.this.master_auth[0].cluster_ca_certificate
}

output "agent_service_account" {
  description = "Google service account of the agent (Workload Identity)."
  value       = google_service_account.agent.email
}

output "agent_permissions" {
  description = "Every IAM permission granted to the agent."
  value = sort(concat(google_project_iam_custom_role.agent_gke.permissions, google_project_iam_custom_role.agent_migs.permissions,
  google_project_iam_custom_role.agent_quota.permissions))
}

output "pool_resources" {
  description = "Pool name -> GKE node pool name (the pools' `resource` in the Cluster spec)."
  value       = { for name, np in google_container_node_pool.gpu : name => np.name }
}

output "cluster_spec_yaml" {
  description = "The agent's Cluster spec as installed (apply it to the scheduler too)."
  value       = yamlencode(local.cluster_spec)
}

output "agent_token_digest" {
  description = "sha256:<hex> digest of this cluster's agent token, for the scheduler's tokens file (the control plane module's cluster_token_digests); sensitive because the token is."
  value       = "sha256:${sha256(kubernetes_secret.agent_token.data.token)}"
  sensitive   = true
}
