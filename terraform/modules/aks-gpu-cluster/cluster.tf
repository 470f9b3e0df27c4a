# The AKS cluster: API server reachable only from the authorized ranges, Entra ID RBAC with local
# accounts off, OIDC issuer + Workload Identity (the agent's federated credential), Azure CNI
# overlay with network policy, host and customer-key disk encryption, a system pool for critical
# add-ons and the agent.

locals {
  name = "meridian-${var.cluster_id}"
  tags = merge(var.tags, { "meridian-cluster" = var.cluster_id, "part-of" = "meridian" })
}

data "azurerm_client_config" "current" {}

resource "azurerm_kubernetes_cluster" "this" {
  #checkov:skip=CKV_AZURE_6:The authorized ranges are the operator's (api_server_authorized_ip_ranges); with none given the cluster is private and has no public API server to restrict.
  name                = local.name
  location            = var.location
  resource_group_name = var.resource_group_name
  dns_prefix          = local.name
  kubernetes_version  = var.kubernetes_version
  sku_tier            = "Standard"
  # Private unless the operator names the ranges that may reach a public API server.
  private_cluster_enabled = length(var.api_server_authorized_ip_ranges) == 0

  automatic_upgrade_channel = "patch"
  node_os_upgrade_channel   = "NodeImage"
  local_account_disabled    = true
  oidc_issuer_enabled       = true
  workload_identity_enabled = true
  azure_policy_enabled      = true
  disk_encryption_set_id    = var.disk_encryption_set_id

  api_server_access_profile {
    authorized_ip_ranges = var.api_server_authorized_ip_ranges
  }

  azure_active_directory_role_based_access_control {
    azure_rbac_enabled = true
    tenant_id          = data.azurerm_client_config.current.tenant_id
  }

  identity {
    type = "SystemAssigned"
  }

  network_profile {
    network_plugin      = "azure"
    network_plugin_mode = "overlay"
    network_policy      = "cilium"
    network_data_plane  = "cilium"
  }

  oms_agent {
    log_analytics_workspace_id = var.log_analytics_workspace_id
  }

  key_vault_secrets_provider {
    secret_rotation_enabled = true
  }

  default_node_pool {
    name                         = "system"
    vm_size                      = var.system_vm_size
    node_count                   = 2
    vnet_subnet_id               = var.subnet_id
    zones                        = [var.zone]
    max_pods                     = 50
    os_disk_type                 = "Ephemeral"
    host_encryption_enabled      = true
    only_critical_addons_enabled = true
    node_labels                  = { "meridian.dev/role" = "system" }
    upgrade_settings {
      max_surge = "33%"
    }
  }

  tags = local.tags
}
