# The Meridian agent of this cluster: token from GCP Secret Manager, its Cluster spec, the agent
# overlay of deploy/kubernetes/ for GKE, and its ServiceAccount annotated for Workload Identity.
# How the overlay deploy/kubernetes/overlays/agent-gke is used: as in modules/eks-gpu-cluster/agent.tf.

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
      cloud     = "gcp"
      region    = var.region
      zone      = var.zone
      provider  = "gcp"
      gcp       = { project = var.project, location = var.region, gke_cluster = google_container_cluster.this.name }
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
        resource      = google_container_node_pool.gpu[p.name].name
      }]
      replicas = {
        backend    = "kubernetes"
        kubernetes = { namespace = var.namespace, image = var.replica_image }
      }
    }
  }
}

resource "kubernetes_namespace" "meridian" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian" }
  }
  depends_on = [google_container_node_pool.system]
}

data "google_secret_manager_secret_version" "agent_token" {
  project = var.project
  secret  = var.token_secret_id
}

# The token passes through Terraform's state (keep the state in an encrypted backend); it never is
# a variable, an argument or a log line.
resource "kubernetes_secret" "agent_token" {
  metadata {
    name      = "meridian-agent-token"
    namespace = kubernetes_namespace.meridian.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { token = data.google_secret_manager_secret_version.agent_token.secret_data }
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
  resources = ["${var.manifests_path}/overlays/agent-gke"]
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
        annotations = { "iam.gke.io/gcp-service-account" = google_service_account.agent.email }
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
  depends_on = [kubernetes_secret.agent_token, kubernetes_secret.scheduler_ca, google_service_account_iam_member.agent_workload_identity]
}
