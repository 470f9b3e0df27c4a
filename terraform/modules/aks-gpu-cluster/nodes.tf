# One AKS node pool per Meridian pool (the Cluster spec's pool resource is its name): spot pools run
# at Spot priority with eviction Delete (AKS taints them
# kubernetes.azure.com/scalesetpriority=spot:NoSchedule, which the kubernetes backend tolerates for
# spot pools). The size belongs to the agent (agent pool count, through the ContainerService API):
# no AKS autoscaler, and Terraform ignores the count.

locals {
  pools = { for p in var.pools : p.name => merge(p, { aks_name = replace(p.name, "-", "") }) }
}

resource "azurerm_kubernetes_cluster_node_pool" "gpu" {
  for_each              = local.pools
  name                  = each.value.aks_name
  kubernetes_cluster_id = azurerm_kubernetes_cluster.this.id
  vm_size               = each.value.instance_type
  node_count            = each.value.min_nodes
  auto_scaling_enabled  = false
  vnet_subnet_id        = var.subnet_id
  zones                 = [var.zone]
  max_pods              = 50
  os_disk_type          = "Managed"
  os_disk_size_gb       = 256

  host_encryption_enabled = true
  priority                = each.value.tier == "spot" ? "Spot" : "Regular"
  eviction_policy         = each.value.tier == "spot" ? "Delete" : null
  spot_max_price          = each.value.tier == "spot" ? each.value.spot_max_price : null

  node_labels = {
    "meridian.dev/cluster" = var.cluster_id
    "meridian.dev/pool"    = each.key
    "meridian.dev/tier"    = each.value.tier
  }
  node_taints = ["nvidia.com/gpu=present:NoSchedule"]
  tags        = local.tags

  lifecycle {
    ignore_changes = [node_count]
  }
}

resource "helm_release" "nvidia_device_plugin" {
  name       = "nvidia-device-plugin"
  namespace  = "kube-system"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = var.device_plugin_version
  values = [yamlencode({
    nodeSelector = { "meridian.dev/cluster" = var.cluster_id }
    tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" },
    { key = "kubernetes.azure.com/scalesetpriority", operator = "Equal", value = "spot", effect = "NoSchedule" }]
  })]
}
