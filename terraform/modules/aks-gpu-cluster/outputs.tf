output "cluster_name" {
  description = "AKS cluster name."
  value       = azurerm_kubernetes_cluster.this.name
}

output "node_resource_group" {
  description = "Resource group AKS keeps the nodes' scale sets in (AKS's own: the agent never touches them)."
  value       = azurerm_kubernetes_cluster.this.node_resource_group
}

output "kube_host" {
  description = "Kubernetes API endpoint."
  value       = azurerm_kubernetes_cluster.this.kube_config[0].host
}

output "cluster_ca_certificate" {
  description = "Base64 PEM of the cluster's CA."
  value       = azurerm_kubernetes_cluster.this.kube_config[0].cluster_ca_certificate
}

output "agent_client_id" {
  description = "Client id of the agent's managed identity."
  value       = azurerm_user_assigned_identity.agent.client_id
}

output "agent_actions" {
  description = "Every Azure action granted to the agent."
  value       = sort(concat(azurerm_role_definition.agent_pools.permissions[0].actions, azurerm_role_definition.agent_reads.permissions[0].actions))
}

output "pool_resources" {
  description = "Pool name -> AKS agent pool name (the pools' `resource` in the Cluster spec)."
  value       = { for name, pool in azurerm_kubernetes_cluster_node_pool.gpu : name => pool.name }
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
