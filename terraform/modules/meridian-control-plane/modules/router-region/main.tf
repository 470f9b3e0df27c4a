# The routers of one client region, on the cluster nearest its clients, from the overlay
# deploy/kubernetes/overlays/router (Deployment, Service and PodDisruptionBudget meridian-router):
# its Service a regional L4 load balancer, the router token from a Secret the caller creates.
#
# How the overlay is used (docs/kubernetes.md, "Terraform"; tests/terraform/test_manifest_contract.py
# renders these patches on the real overlay and fails on any name, key or mount that is not there):
# the overlay already serves HTTPS on port 443 from the Secret meridian-router-tls and verifies the
# scheduler with the Secret meridian-scheduler-ca (both mounted from the base); here cert-manager
# issues meridian-router-tls for this region's name (the router reloads it when renewed) and the
# Secret meridian-scheduler-ca is created from scheduler_ca_pem; the overlay's generated ConfigMap
# meridian-router-config is replaced by this region's settings (the overlay's own, with the region
# and the scheduler's address); the container `router` gets `image`; its volume scheduler-token
# reads the Secret router_token_secret (key token).

locals {
  tls_dir = "/etc/meridian/secrets/tls"
  # base/router/router-config.yaml, with this region's values.
  router_config = {
    listen_host           = "0.0.0.0"
    listen_port           = 8080
    metrics_port          = 9091
    region                = var.client_region
    scheduler_address     = var.scheduler_address
    tls_cert_file         = "${local.tls_dir}/tls.crt"
    tls_key_file          = "${local.tls_dir}/tls.key"
    scheduler_tls_ca_file = "/etc/meridian/secrets/scheduler-ca/ca.crt"
    # Every scheduler verified against the host of scheduler_address (a standby redirects to the
    # leader's pod IP, which the certificate does not name).
    scheduler_tls_server_name = replace(var.scheduler_address, "/:[0-9]+$/", "")
    lkg_store                 = "file"
    lkg_path                  = "/var/lib/meridian/router/lkg.json"
  }
}

resource "kubernetes_namespace" "this" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian", "meridian.dev/client-region" = var.client_region }
  }
}

# The CA of the scheduler's gRPC certificate (public data): the Secret the overlay mounts for
# scheduler_tls_ca_file.
resource "kubernetes_secret" "scheduler_ca" {
  metadata {
    name      = "meridian-scheduler-ca"
    namespace = kubernetes_namespace.this.metadata[0].name
    labels    = { "app.kubernetes.io/part-of" = "meridian", "app.kubernetes.io/managed-by" = "terraform" }
  }
  data = { "ca.crt" = var.scheduler_ca_pem }
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
  resources = ["${var.manifests_path}/overlays/router"]
  namespace = var.namespace

  config_map_generator {
    name     = "meridian-router-config"
    behavior = "replace"
    literals = ["router.yaml=${yamlencode(local.router_config)}"]
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
      spec = {
        replicas = var.replicas
        template = { spec = {
          containers = [{ name = "router", image = var.image }]
          volumes    = [{ name = "scheduler-token", secret = { secretName = var.router_token_secret } }]
        } }
      }
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
    })
  }
}

resource "kustomization_resource" "router" {
  for_each   = data.kustomization_overlay.router.ids
  manifest   = data.kustomization_overlay.router.manifests[each.value]
  depends_on = [kubectl_manifest.certificate, kubernetes_secret.scheduler_ca]
}
