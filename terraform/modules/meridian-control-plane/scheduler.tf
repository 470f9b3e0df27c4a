# The scheduler nodes, from the control-plane overlay of deploy/kubernetes/, with their secrets
# from AWS Secrets Manager mounted as files (never arguments): the admin token, the tokens file, the
# state URL (it holds the Redis password; the scheduler reads MERIDIAN_STATE_URL) and the gRPC
# certificate. The scheduler's gRPC port is published through an internet-facing NLB: agents in
# other clouds dial it over TLS with their cluster token.
#
# Contract with deploy/kubernetes/control-plane (k8s-pack's manifests): overlays scheduler
# (external Redis) and scheduler-with-redis (in-cluster Redis Service meridian-redis); a
# Deployment and a Service named meridian-scheduler; the Deployment mounts the Secret
# meridian-scheduler-secrets (keys admin-token, tokens.yaml) and the Secret meridian-scheduler-tls,
# and takes MERIDIAN_STATE_URL from the Secret meridian-scheduler-state (key url).

locals {
  image = regex("^(?P<name>[^@]+?)(?::(?P<tag>[A-Za-z0-9_.-]+))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$", var.scheduler_image)
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

data "aws_secretsmanager_secret_version" "tokens_file" {
  secret_id = var.tokens_file_secret_arn
}

resource "kubernetes_secret" "scheduler" {
  metadata {
    name      = "meridian-scheduler-secrets"
    namespace = kubernetes_namespace.this.metadata[0].name
  }
  data = {
    "admin-token" = data.aws_secretsmanager_secret_version.admin_token.secret_string
    "tokens.yaml" = data.aws_secretsmanager_secret_version.tokens_file.secret_string
  }
}

resource "kubernetes_secret" "state" {
  metadata {
    name      = "meridian-scheduler-state"
    namespace = kubernetes_namespace.this.metadata[0].name
  }
  data = { url = local.state_url }
}

data "kustomization_overlay" "scheduler" {
  resources = ["${var.manifests_path}/control-plane/overlays/${var.redis_mode == "in_cluster" ? "scheduler-with-redis" : "scheduler"}"]
  namespace = var.namespace

  images {
    name     = "meridian"
    new_name = local.image.name
    new_tag  = local.image.tag
    digest   = local.image.digest
  }

  patches {
    target {
      kind = "Deployment"
      name = "meridian-scheduler"
    }
    patch = yamlencode({
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = "meridian-scheduler" }
      spec       = { replicas = var.scheduler_replicas }
    })
  }

  patches {
    target {
      kind = "Service"
      name = "meridian-scheduler"
    }
    patch = yamlencode({
      apiVersion = "v1"
      kind       = "Service"
      metadata = {
        name = "meridian-scheduler"
        annotations = {
          "service.beta.kubernetes.io/aws-load-balancer-type"            = "external"
          "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
          "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internet-facing"
        }
      }
      spec = { type = "LoadBalancer" }
    })
  }
}

resource "kustomization_resource" "scheduler" {
  for_each   = data.kustomization_overlay.scheduler.ids
  manifest   = data.kustomization_overlay.scheduler.manifests[each.value]
  depends_on = [kubernetes_secret.scheduler, kubernetes_secret.state, kubectl_manifest.scheduler_certificate]
}
