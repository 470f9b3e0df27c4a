# The Meridian agent of this cluster: its IAM role (IRSA, least privilege: iam.tf), its token from
# AWS Secrets Manager, its Cluster spec, and the overlay deploy/kubernetes/overlays/agent-eks.
#
# How the overlay is used (docs/kubernetes.md, "Terraform"; tests/terraform/test_manifest_contract.py
# renders these patches on the real overlay and fails on any name, key or mount that is not there):
# the overlay's generated ConfigMap meridian-agent-cluster (mounted at /etc/meridian/cluster) is
# replaced by this cluster's spec; the ServiceAccount meridian-agent gets this cluster's IAM role;
# the container `agent` gets agent_image; the Secrets meridian-agent-token (key token, mounted at
# /etc/meridian/secrets/agent) and meridian-scheduler-ca (key ca.crt, the scheduler's CA, mounted
# at /etc/meridian/secrets/scheduler-ca) and the namespace are created here, as the overlay expects
# them to exist.

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
      cloud     = "aws"
      region    = var.region
      zone      = var.zone != "" ? var.zone : null
      provider  = "aws"
      aws       = { account_id = data.aws_caller_identity.current.account_id }
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
        resource      = module.gpu_pool[p.name].asg_name
      }]
      replicas = {
        backend    = "kubernetes"
        kubernetes = { namespace = var.namespace, image = var.replica_image, node_pool_label = "meridian.dev/pool" }
      }
    }
  }
}

resource "kubernetes_namespace" "meridian" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian" }
  }
  depends_on = [aws_eks_node_group.system]
}

data "aws_secretsmanager_secret_version" "agent_token" {
  secret_id = var.token_secret_arn
}

# The token passes through Terraform's state (keep the state in an encrypted backend); it never is
# a variable, an argument or a log line. Rotating it: docs/operations.md.
resource "kubernetes_secret" "agent_token" {
  metadata {
    name      = "meridian-agent-token"
    namespace = kubernetes_namespace.meridian.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { token = data.aws_secretsmanager_secret_version.agent_token.secret_string }
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
  resources = ["${var.manifests_path}/overlays/agent-eks"]
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
        annotations = { "eks.amazonaws.com/role-arn" = aws_iam_role.agent.arn }
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
  depends_on = [kubernetes_secret.agent_token, kubernetes_secret.scheduler_ca, helm_release.nvidia_device_plugin, helm_release.node_termination_handler, kubernetes_storage_class_v1.gp3]
}
