# The routers of one client region, on the cluster nearest its clients, from the overlay
# deploy/kubernetes/overlays/router (Deployment, Service and PodDisruptionBudget meridian-router):
# its Service a regional L4 load balancer, the router token from a Secret the caller creates.
#
# How the overlay is used (docs/kubernetes.md, "Terraform"; tests/terraform/test_manifest_contract.py
# renders these patches on the real overlay and fails on any name, key or mount that is not there):
# the overlay's generated ConfigMap meridian-router-config (mounted at /etc/meridian/router) is
# replaced by this region's settings (the overlay's own, with the region, the scheduler's address
# and its CA, and HTTPS from the certificate cert-manager keeps in the Secret meridian-router-tls,
# mounted at /etc/meridian/secrets/tls; the router reloads it when renewed); the container `router`
# gets `image` and HTTPS probes; its volume scheduler-token reads the Secret router_token_secret
# (key token); the Service serves port 443.

locals {
  config_dir = "/etc/meridian/router"
  tls_dir    = "/etc/meridian/secrets/tls"
  # base/router/router-config.yaml, with this region's values.
  router_config = {
    listen_host           = "0.0.0.0"
    listen_port           = 8080
    metrics_port          = 9091
    region                = var.client_region
    scheduler_address     = var.scheduler_address
    scheduler_tls_ca_file = "${local.config_dir}/scheduler-ca.crt"
    tls_cert_file         = "${local.tls_dir}/tls.crt"
    tls_key_file          = "${local.tls_dir}/tls.key"
    lkg_store             = "file"
    lkg_path              = "/var/lib/meridian/router/lkg.json"
  }
}

resource "kubernetes_namespace" "this" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "meridian", "meridian.dev/client-region" = var.client_region }
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
  resources = ["${var.manifests_path}/overlays/router"]
  namespace = var.namespace

  config_map_generator {
    name     = "meridian-router-config"
    behavior = "replace"
    literals = [
      "router.yaml=${yamlencode(local.router_config)}",
      "scheduler-ca.crt=${var.scheduler_ca_pem}",
    ]
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
          containers = [{
            name           = "router"
            image          = var.image
            readinessProbe = { httpGet = { scheme = "HTTPS" } }
            livenessProbe  = { httpGet = { scheme = "HTTPS" } }
            volumeMounts   = [{ name = "tls", mountPath = local.tls_dir, readOnly = true }]
          }]
          volumes = [
            { name = "scheduler-token", secret = { secretName = var.router_token_secret } },
            { name = "tls", secret = { secretName = "meridian-router-tls", defaultMode = 288 } },
          ]
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

  patches {
    target {
      kind = "Service"
      name = "meridian-router"
    }
    patch = yamlencode([{ op = "replace", path = "/spec/ports/0/port", value = 443 }])
  }
}

resource "kustomization_resource" "router" {
  for_each   = data.kustomization_overlay.router.ids
  manifest   = data.kustomization_overlay.router.manifests[each.value]
  depends_on = [kubectl_manifest.certificate]
}
