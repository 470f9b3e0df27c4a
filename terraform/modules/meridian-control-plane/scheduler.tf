# The scheduler nodes and, with redis_mode = in_cluster, their Redis, from the overlay
# deploy/kubernetes/overlays/scheduler; their secrets mounted as files or taken from a Secret by
# the environment (never arguments). The overlay's Service meridian-scheduler-grpc (the gRPC port
# alone; the admin API stays inside the cluster) is an internet-facing NLB: agents and routers in
# other clouds dial it over TLS with their token.
#
# How the overlay is used (docs/kubernetes.md, "Terraform"; tests/terraform/test_manifest_contract.py
# renders these patches on the real overlay and fails on any name, key or mount that is not there):
# the overlay already serves gRPC over TLS from the Secret meridian-scheduler-tls and the admin API
# over HTTPS from meridian-scheduler-admin-tls (cert-manager keeps both: tls.tf), and reads the
# Redis password from the Secret meridian-redis-auth (key password). Created here, as the overlay
# expects: the Secrets meridian-admin-token (key token), meridian-scheduler-tokens (key
# tokens.yaml, built from every cluster's and router's token digest) and meridian-redis-auth (the
# password of the overlay's Redis, or ElastiCache's auth token); the container `scheduler` gets
# scheduler_image and, unless Redis is the overlay's own, MERIDIAN_STATE_URL from the Secret
# meridian-scheduler-state; the overlay's Redis objects are then left out. With redis_mode =
# external the URL in that Secret carries the password, so no meridian-redis-auth is made and the
# overlay's reference to it is marked optional.

locals {
  nlb = {
    "service.beta.kubernetes.io/aws-load-balancer-type"            = "external"
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
    "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internet-facing"
  }
  # Env of the container `scheduler`, merged by name into the overlay's: the state URL unless Redis
  # is the overlay's own; with an external URL (it carries the password) the overlay's
  # MERIDIAN_REDIS_PASSWORD is made optional, since there is no meridian-redis-auth to read.
  state_url_env = {
    name      = "MERIDIAN_STATE_URL"
    value     = null
    valueFrom = { secretKeyRef = { name = "meridian-scheduler-state", key = "url" } }
  }
  scheduler_env = {
    in_cluster  = []
    elasticache = [local.state_url_env]
    external = [local.state_url_env, {
      name      = "MERIDIAN_REDIS_PASSWORD"
      valueFrom = { secretKeyRef = { name = "meridian-redis-auth", key = "password", optional = true } }
    }]
  }[var.redis_mode]
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

# The Redis password the overlay's scheduler reads (MERIDIAN_REDIS_PASSWORD) and, in_cluster, the
# overlay's redis-server requires; with ElastiCache its auth token.
resource "kubernetes_secret" "redis_auth" {
  count = var.redis_mode == "external" ? 0 : 1
  metadata {
    name      = "meridian-redis-auth"
    namespace = kubernetes_namespace.this.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { password = random_password.redis[0].result }
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
            env   = local.scheduler_env
          }]
        } }
      }
    })
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
  for_each = data.kustomization_overlay.scheduler.ids
  manifest = data.kustomization_overlay.scheduler.manifests[each.value]
  depends_on = [
    kubernetes_secret.admin_token, kubernetes_secret.tokens, kubernetes_secret.state, kubernetes_secret.redis_auth,
    kubectl_manifest.scheduler_certificate, kubectl_manifest.scheduler_admin_certificate,
  ]
}
