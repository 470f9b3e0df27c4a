# The routers of one client region, on the cluster nearest its clients: the router overlay of
# deploy/kubernetes/ (Deployment and Service meridian-router, a PodDisruptionBudget), its Service a
# regional L4 load balancer, TLS from cert-manager, the router token from a Secret.
# Contract with deploy/kubernetes/control-plane/overlays/router: the Deployment mounts the Secret
# named by router_token_secret (key token), the Secret meridian-router-tls and the ConfigMap
# meridian-router (keys region, scheduler, scheduler-ca.crt).

locals {
  image = regex("^(?P<name>[^@]+?)(?::(?P<tag>[A-Za-z0-9_.-]+))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$", var.image)
}

resource "kubernetes_namespace" "this" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian", "meridian.dev/client-region" = var.client_region }
  }
}

resource "kubernetes_config_map" "router" {
  metadata {
    name      = "meridian-router"
    namespace = kubernetes_namespace.this.metadata[0].name
  }
  data = {
    region             = var.client_region
    scheduler          = var.scheduler_address
    "scheduler-ca.crt" = var.scheduler_ca_pem
    token-secret       = var.router_token_secret
  }
}

resource "kubectl_manifest" "certificate" {
  yaml_body = yamlencode({
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata   = { name = "meridian-router", namespace = kubernetes_namespace.this.metadata[0].name }
    spec = {
      secretName = "meridian-router-tls"
      dnsNames   = [var.hostname]
      privateKey = { algorithm = "ECDSA", size = 256, rotationPolicy = "Always" }
      issuerRef  = { kind = "ClusterIssuer", name = var.certificate_issuer }
    }
  })
}

data "kustomization_overlay" "router" {
  resources = ["${var.manifests_path}/control-plane/overlays/router"]
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
      name = "meridian-router"
    }
    patch = yamlencode({
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = "meridian-router" }
      spec       = { replicas = var.replicas }
    })
  }

  patches {
    target {
      kind = "Service"
      name = "meridian-router"
    }
    patch = yamlencode({
      apiVersion = "v1"
      kind       = "Service"
      metadata   = { name = "meridian-router", annotations = var.load_balancer_annotations }
      spec       = { type = "LoadBalancer", externalTrafficPolicy = "Local" }
    })
  }
}

resource "kustomization_resource" "router" {
  for_each   = data.kustomization_overlay.router.ids
  manifest   = data.kustomization_overlay.router.manifests[each.value]
  depends_on = [kubernetes_config_map.router, kubectl_manifest.certificate]
}
