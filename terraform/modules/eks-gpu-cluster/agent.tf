# The Meridian agent of this cluster: its IAM role (IRSA, least privilege: iam.tf), its token from
# AWS Secrets Manager, its Cluster spec, and the agent overlay of deploy/kubernetes/ for EKS.
#
# Contract with deploy/kubernetes/agent (k8s-pack's manifests): a ServiceAccount and a Deployment
# named meridian-agent; the Deployment mounts the ConfigMap meridian-agent-cluster at /etc/meridian
# (keys cluster.yaml, scheduler-ca.crt) and the Secret meridian-agent-token at
# /var/run/secrets/meridian (key token); the overlay holds no Namespace object.

locals {
  token_path = "/var/run/secrets/meridian/token"
  ca_path    = "/etc/meridian/scheduler-ca.crt"
  image      = regex("^(?P<name>[^@]+?)(?::(?P<tag>[A-Za-z0-9_.-]+))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$", var.agent_image)
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
      scheduler = { address = var.scheduler_address, tls = { ca_file = local.ca_path } }
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

resource "kubernetes_config_map" "agent" {
  metadata {
    name      = "meridian-agent-cluster"
    namespace = kubernetes_namespace.meridian.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = {
    "cluster.yaml"     = yamlencode(local.cluster_spec)
    "scheduler-ca.crt" = var.scheduler_ca_pem
  }
}

data "kustomization_overlay" "agent" {
  resources = ["${var.manifests_path}/agent/overlays/eks"]
  namespace = var.namespace

  images {
    name     = "meridian"
    new_name = local.image.name
    new_tag  = local.image.tag
    digest   = local.image.digest
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
}

resource "kustomization_resource" "agent" {
  for_each = data.kustomization_overlay.agent.ids
  manifest = data.kustomization_overlay.agent.manifests[each.value]
  depends_on = [kubernetes_secret.agent_token, kubernetes_config_map.agent, helm_release.nvidia_device_plugin,
  helm_release.node_termination_handler]
}
