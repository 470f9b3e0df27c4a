# The Meridian agent of this cluster: token from Azure Key Vault, its Cluster spec (the aks provider
# sizes this cluster's agent pools through the ContainerService API, never their scale sets), the
# agent overlay of deploy/kubernetes/ for AKS, its ServiceAccount and pods labelled for Workload
# Identity.
# How the overlay deploy/kubernetes/overlays/agent-aks is used: as in modules/eks-gpu-cluster/agent.tf.

locals {
  token_path = "/etc/meridian/secrets/agent/token"
  ca_path    = "/etc/meridian/secrets/scheduler-ca/ca.crt"
  # The host of scheduler_address: every scheduler is verified against it (a standby redirects to
  # the leader\'s pod IP, which the certificate does not name).
  scheduler_host = replace(var.scheduler_address, "/:[0-9]+$/", "")
  cluster_spec = {
    apiVersion = "meridian/v1"
    kind       = "Cluster"
    metadata   = { name = var.cluster_id }
    spec = {
      cloud    = "azure"
      region   = var.location
      zone     = var.zone
      provider = "aks"
      azure = {
        subscription_id = data.azurerm_client_config.current.subscription_id
        resource_group  = var.resource_group_name
        aks_cluster     = azurerm_kubernetes_cluster.this.name
      }
      auth      = { token_file = local.token_path }
      scheduler = { address = var.scheduler_address, tls = { ca_file = local.ca_path, server_name = local.scheduler_host } }
      # As the Deployment runs it: status port 9090 (its probes) on the pod's interfaces, state on the PVC.
      agent = { metrics_port = 9090, advertise_host = "0.0.0.0", state_dir = "/var/lib/meridian/agent" }
      pools = [for p in var.pools : {
        name          = p.name
        instance_type = p.instance_type
        tier          = p.tier
        min_nodes     = p.min_nodes
        max_nodes     = p.max_nodes
        resource      = azurerm_kubernetes_cluster_node_pool.gpu[p.name].name
      }]
      replicas = {
        backend = "kubernetes"
        # Azure CNI Overlay (cluster.tf): pod IPs are not routable outside the cluster, the nodes'
        # are (the VNet, its peerings, a VPN): routers elsewhere reach a replica at its node's
        # internal address through a per-replica NodePort Service.
        kubernetes = {
          namespace = var.namespace, image = var.replica_image,
          endpoint  = { mode = "service", service_type = "NodePort", node_address = "InternalIP" }
        }
      }
    }
  }
}

resource "kubernetes_namespace" "meridian" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian" }
  }
}

data "azurerm_key_vault_secret" "agent_token" {
  name         = var.token_secret_name
  key_vault_id = var.key_vault_id
}

# The token passes through Terraform's state (keep the state in an encrypted backend); it never is
# a variable, an argument or a log line.
resource "kubernetes_secret" "agent_token" {
  metadata {
    name      = "meridian-agent-token"
    namespace = kubernetes_namespace.meridian.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { token = data.azurerm_key_vault_secret.agent_token.value }
}

# The CA of the scheduler's gRPC certificate (public data), where the overlay mounts it: the Secret
# meridian-scheduler-ca, key ca.crt (the spec's scheduler.tls.ca_file).
resource "kubernetes_secret" "scheduler_ca" {
  metadata {
    name      = "meridian-scheduler-ca"
    namespace = kubernetes_namespace.meridian.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { "ca.crt" = var.scheduler_ca_pem }
}

data "kustomization_overlay" "agent" {
  resources = ["${var.manifests_path}/overlays/agent-aks"]
  namespace = var.namespace

  config_map_generator {
    name     = "meridian-agent-cluster"
    behavior = "replace"
    literals = [
      "cluster.yaml=${yamlencode(local.cluster_spec)}",
    ]
  }

  patches {
    target {
      kind = "ServiceAccount"
      name = "meridian-agent"
    }
    patch = yamlencode({
      apiVersion = "v1"
      kind       = "ServiceAccount"
      metadata = {
        name        = "meridian-agent"
        annotations = { "azure.workload.identity/client-id" = azurerm_user_assigned_identity.agent.client_id }
      }
    })
  }

  patches {
    target {
      kind = "Deployment"
      name = "meridian-agent"
    }
    patch = yamlencode({
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = "meridian-agent" }
      spec       = { template = { spec = { containers = [{ name = "agent", image = var.agent_image }] } } }
    })
  }

  # Routers in other clusters: their addresses join the replicas' NetworkPolicy (a JSON patch: the
  # policy's ingress list has no merge key).
  dynamic "patches" {
    for_each = length(var.router_cidrs) > 0 ? { routers = var.router_cidrs } : {}
    content {
      target {
        kind = "NetworkPolicy"
        name = "meridian-replicas"
      }
      patch = yamlencode([{
        op   = "add"
        path = "/spec/ingress/-"
        value = {
          from  = [for c in patches.value : { ipBlock = { cidr = c } }]
          ports = [{ protocol = "TCP", port = 30000 }, { protocol = "TCP", port = 30443 }]
        }
      }])
    }
  }
}

resource "kustomization_resource" "agent" {
  for_each   = data.kustomization_overlay.agent.ids
  manifest   = data.kustomization_overlay.agent.manifests[each.value]
  depends_on = [kubernetes_secret.agent_token, kubernetes_secret.scheduler_ca, azurerm_federated_identity_credential.agent, helm_release.nvidia_device_plugin]
}
