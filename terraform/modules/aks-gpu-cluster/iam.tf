# The agent's user-assigned managed identity, federated with its Kubernetes ServiceAccount
# (Workload Identity), with exactly the actions agents/providers/aks.py uses
# (tests/terraform/test_iam.py compares them with the provider's calls):
# - on this AKS cluster only: agent_pools.list and .get ->
#   Microsoft.ContainerService/managedClusters/agentPools/read, .begin_create_or_update (the pool's
#   count, the autoscaler off) -> .../agentPools/write, .begin_delete_machines (a shrink that spares
#   the nodes hosting replicas) -> .../agentPools/deleteMachines/action, machines.list (the nodes)
#   -> .../agentPools/machines/read;
# - on the subscription, because these are subscription-level resources with no narrower scope:
#   resource_skus.list -> Microsoft.Compute/skus/read, usage.list ->
#   Microsoft.Compute/locations/usages/read, and the polling of AKS's long-running operations ->
#   Microsoft.ContainerService/locations/operations/read (their status) and
#   .../locations/operationresults/read (deleteMachines' final result).
# No scale set action at all: AKS owns its node pools' scale sets and does not support changes made
# to them directly.

resource "azurerm_user_assigned_identity" "agent" {
  name                = "${local.name}-agent"
  location            = var.location
  resource_group_name = var.resource_group_name
  tags                = local.tags
}

resource "azurerm_federated_identity_credential" "agent" {
  name                = "${local.name}-agent"
  resource_group_name = var.resource_group_name
  parent_id           = azurerm_user_assigned_identity.agent.id
  issuer              = azurerm_kubernetes_cluster.this.oidc_issuer_url
  subject             = "system:serviceaccount:${var.namespace}:meridian-agent"
  audience            = ["api://AzureADTokenExchange"]
}

locals {
  subscription_scope = "/subscriptions/${data.azurerm_client_config.current.subscription_id}"
}

resource "azurerm_role_definition" "agent_pools" {
  name        = "meridian-agent-pools-${var.cluster_id}"
  scope       = local.subscription_scope
  description = "Read and resize the agent pools of ${local.name} (assigned on that AKS cluster only)."
  permissions {
    actions = [
      "Microsoft.ContainerService/managedClusters/agentPools/read",
      "Microsoft.ContainerService/managedClusters/agentPools/write",
      "Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action",
      "Microsoft.ContainerService/managedClusters/agentPools/machines/read",
    ]
    not_actions = []
  }
  assignable_scopes = [local.subscription_scope]
}

resource "azurerm_role_definition" "agent_reads" {
  name        = "meridian-agent-reads-${var.cluster_id}"
  scope       = local.subscription_scope
  description = "VM size capabilities, GPU quota usage and AKS operation status for ${local.name}'s agent."
  permissions {
    actions = [
      "Microsoft.Compute/skus/read",
      "Microsoft.Compute/locations/usages/read",
      "Microsoft.ContainerService/locations/operations/read",
      "Microsoft.ContainerService/locations/operationresults/read",
    ]
    not_actions = []
  }
  assignable_scopes = [local.subscription_scope]
}

resource "azurerm_role_assignment" "agent_pools" {
  scope              = azurerm_kubernetes_cluster.this.id
  role_definition_id = azurerm_role_definition.agent_pools.role_definition_resource_id
  principal_id       = azurerm_user_assigned_identity.agent.principal_id
}

resource "azurerm_role_assignment" "agent_reads" {
  scope              = local.subscription_scope
  role_definition_id = azurerm_role_definition.agent_reads.role_definition_resource_id
  principal_id       = azurerm_user_assigned_identity.agent.principal_id
}
