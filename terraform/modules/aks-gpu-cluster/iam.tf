# The agent's user-assigned managed identity, federated with its Kubernetes ServiceAccount
# (Workload Identity), with exactly the actions agents/providers/azure.py uses
# (tests/terraform/test_iam.py compares them with the provider's calls):
# - per pool scale set, assigned on that scale set only: virtual_machine_scale_sets.get ->
#   Microsoft.Compute/virtualMachineScaleSets/read, .begin_update -> .../write,
#   virtual_machine_scale_set_vms.list -> .../virtualMachines/read;
# - on the subscription, because these are subscription-level resources with no narrower scope:
#   resource_skus.list -> Microsoft.Compute/skus/read, usage.list ->
#   Microsoft.Compute/locations/usages/read, and the polling of begin_update's long-running
#   operation -> Microsoft.Compute/locations/operations/read.

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
  pool_vmss_ids      = { for name, found in data.azurerm_resources.pool_vmss : name => one(found.resources).id }
}

resource "azurerm_role_definition" "agent_pools" {
  name        = "meridian-agent-pools-${var.cluster_id}"
  scope       = local.subscription_scope
  description = "Read and resize the GPU pool scale sets of ${local.name} (assigned on each scale set)."
  permissions {
    actions = [
      "Microsoft.Compute/virtualMachineScaleSets/read",
      "Microsoft.Compute/virtualMachineScaleSets/write",
      "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    ]
    not_actions = []
  }
  assignable_scopes = [local.subscription_scope]
}

resource "azurerm_role_definition" "agent_reads" {
  name        = "meridian-agent-reads-${var.cluster_id}"
  scope       = local.subscription_scope
  description = "VM size capabilities, GPU quota usage and operation status for ${local.name}'s agent."
  permissions {
    actions = [
      "Microsoft.Compute/skus/read",
      "Microsoft.Compute/locations/usages/read",
      "Microsoft.Compute/locations/operations/read",
    ]
    not_actions = []
  }
  assignable_scopes = [local.subscription_scope]
}

resource "azurerm_role_assignment" "agent_pools" {
  for_each           = local.pool_vmss_ids
  scope              = each.value
  role_definition_id = azurerm_role_definition.agent_pools.role_definition_resource_id
  principal_id       = azurerm_user_assigned_identity.agent.principal_id
}

resource "azurerm_role_assignment" "agent_reads" {
  scope              = local.subscription_scope
  role_definition_id = azurerm_role_definition.agent_reads.role_definition_resource_id
  principal_id       = azurerm_user_assigned_identity.agent.principal_id
}
