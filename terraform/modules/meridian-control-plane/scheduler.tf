# The scheduler nodes and, with redis_mode = in_cluster, their Redis, from the overlay
# deploy/kubernetes/overlays/scheduler; their secrets mounted as files or taken from a Secret by
# the environment (never arguments). The overlay's Service meridian-scheduler-grpc (the gRPC port
# alone; the admin API stays inside the cluster) is an internet-facing NLB: agents and routers in
# other clouds dial it over TLS with their token.
#
# How the overlay is used (docs/kubernetes.md, "Terraform"; tests/terraform/test_manifest_contract.py
# renders these patches on the real overlay and fails on any name, key or mount that is not there):
# the Secrets meridian-admin-token (key token) and meridian-scheduler-tokens (key tokens.yaml, built
# here from every cluster's and router's token digest) are created here, as the overlay expects; the
# container `scheduler` gets scheduler_image, the certificate cert-manager keeps in the Secret
# meridian-scheduler-tls (--tls-cert-file, --tls-key-file) and, unless Redis is the overlay's own,
# MERIDIAN_STATE_URL from the Secret meridian-scheduler-state, whose URL holds the Redis password;
# the overlay's Redis objects are then left out.

locals {
  tls_dir = "/etc/meridian/secrets/tls"
  nlb = {
    "service.beta.kubernetes.io/aws-load-balancer-type"            = "external"
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
    "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internet-facing"
  }
  # The overlay's in-cluster Redis, left out when the state lives elsewhere.
  redis_objects = var.redis_mode == "in_cluster" ? {} : {
    "apps/v1:StatefulSet"                = "meridian-redis"
    "v1:Service"                         = "meridian-redis"
    "networking.k8s.io/v1:NetworkPolicy" = "meridian-redis"
  }
}

resource "kubernetes_namespace" "this" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian" }
  }
}

data "aws_secretsmanager_secret_version" "admin_token" {
  secret_id = var.admin_token_secret_arn
}

# Passes through Terraform's state (keep it in an encrypted backend), as every Secret made here.
resource "kubernetes_secret" "admin_token" {
  metadata {
    name      = "meridian-admin-token"
    namespace = kubernetes_namespace.this.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { token = data.aws_secretsmanager_secret_version.admin_token.secret_string }
}

# The scheduler's tokens file: digests only (sha256:<hex> of each token), one per cluster and one per
# router region, so neither the file nor this module holds a token.
resource "kubernetes_secret" "tokens" {
  metadata {
    name      = "meridian-scheduler-tokens"
    namespace = kubernetes_namespace.this.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { "tokens.yaml" = yamlencode({ clusters = var.cluster_token_digests, routers = var.router_token_digests }) }
}

resource "kubernetes_secret" "state" {
  count = var.redis_mode == "in_cluster" ? 0 : 1
  metadata {
    name      = "meridian-scheduler-state"
    namespace = kubernetes_namespace.this.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { url = local.state_url }
}

data "kustomization_overlay" "scheduler" {
  resources = ["${var.manifests_path}/overlays/scheduler"]
  namespace = var.namespace

  patches {
    target {
      kind = "Deployment"
      name = "meridian-scheduler"
    }
    patch = yamlencode({
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = "meridian-scheduler" }
      spec = {
        replicas = var.scheduler_replicas
        template = { spec = {
          containers = [{
            name  = "scheduler"
            image = var.scheduler_image
            env = var.redis_mode == "in_cluster" ? [] : [{
              name      = "MERIDIAN_STATE_URL"
              value     = null
              valueFrom = { secretKeyRef = { name = "meridian-scheduler-state", key = "url" } }
            }]
            volumeMounts = [{ name = "tls", mountPath = local.tls_dir, readOnly = true }]
          }]
          volumes = [{ name = "tls", secret = { secretName = "meridian-scheduler-tls", defaultMode = 288 } }]
        } }
      }
    })
  }

  # Arguments are a plain list (no merge key): appended, so the overlay's own stay as they are.
  patches {
    target {
      kind = "Deployment"
      name = "meridian-scheduler"
    }
    patch = yamlencode([
      { op = "add", path = "/spec/template/spec/containers/0/args/-", value = "--tls-cert-file=${local.tls_dir}/tls.crt" },
      { op = "add", path = "/spec/template/spec/containers/0/args/-", value = "--tls-key-file=${local.tls_dir}/tls.key" },
    ])
  }

  patches {
    target {
      kind = "Service"
      name = "meridian-scheduler-grpc"
    }
    patch = yamlencode({
      apiVersion = "v1"
      kind       = "Service"
      metadata   = { name = "meridian-scheduler-grpc", annotations = local.nlb }
    })
  }

  dynamic "patches" {
    for_each = local.redis_objects
    content {
      target {
        kind = split(":", patches.key)[1]
        name = patches.value
      }
      patch = yamlencode({
        apiVersion = split(":", patches.key)[0]
        kind       = split(":", patches.key)[1]
        metadata   = { name = patches.value }
        "$patch"   = "delete"
      })
    }
  }
}

resource "kustomization_resource" "scheduler" {
  for_each   = data.kustomization_overlay.scheduler.ids
  manifest   = data.kustomization_overlay.scheduler.manifests[each.value]
  depends_on = [kubernetes_secret.admin_token, kubernetes_secret.tokens, kubernetes_secret.state, kubectl_manifest.scheduler_certificate]
}
