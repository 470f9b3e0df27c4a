# Certificates: cert-manager, one mechanism on every cloud. The fleet's private CA (generated here,
# so its certificate is known to Terraform and handed to every agent module as scheduler_ca_pem;
# its key is kept in Terraform's state and in a Secret for cert-manager) signs the scheduler's
# gRPC certificate and its admin API's, which cert-manager renews; agents and routers trust that CA
# (the Secret meridian-scheduler-ca their modules create from ca_pem), and so does the CLI
# (--ca-file) for the admin API.
# Why not the clouds' own certificates: ACM certificates cannot be exported to a pod (the scheduler
# terminates TLS itself, for mutual TLS), Google-managed certificates exist only on HTTP(S) load
# balancers (routers sit behind L4 regional load balancers, for streaming and latency), and Key
# Vault certificates would need a CSI driver on AKS only. Routers' public certificates come from the
# ClusterIssuer each router region names (e.g. an ACME issuer): modules/router-region.

resource "helm_release" "cert_manager" {
  name             = "cert-manager"
  namespace        = "cert-manager"
  create_namespace = true
  repository       = "https://charts.jetstack.io"
  chart            = "cert-manager"
  version          = var.cert_manager_version
  values           = [yamlencode({ crds = { enabled = true } })]
}

resource "tls_private_key" "ca" {
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_self_signed_cert" "ca" {
  private_key_pem       = tls_private_key.ca.private_key_pem
  is_ca_certificate     = true
  validity_period_hours = 24 * 365 * 5
  early_renewal_hours   = 24 * 90
  allowed_uses          = ["cert_signing", "crl_signing", "digital_signature"]
  subject {
    common_name  = "${var.name} fleet CA"
    organization = "Meridian"
  }
}

resource "kubernetes_secret" "ca" {
  metadata {
    name      = "${var.name}-ca"
    namespace = helm_release.cert_manager.namespace
  }
  type = "kubernetes.io/tls"
  data = {
    "tls.crt" = tls_self_signed_cert.ca.cert_pem
    "tls.key" = tls_private_key.ca.private_key_pem
  }
}

resource "kubectl_manifest" "ca_issuer" {
  yaml_body = yamlencode({
    apiVersion = "cert-manager.io/v1"
    kind       = "ClusterIssuer"
    metadata   = { name = "${var.name}-ca" }
    spec       = { ca = { secretName = kubernetes_secret.ca.metadata[0].name } }
  })
  depends_on = [helm_release.cert_manager]
}

resource "kubectl_manifest" "scheduler_certificate" {
  yaml_body = yamlencode({
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata   = { name = "meridian-scheduler", namespace = kubernetes_namespace.this.metadata[0].name }
    spec = {
      secretName  = "meridian-scheduler-tls"
      dnsNames    = [var.scheduler_hostname]
      duration    = "2160h"
      renewBefore = "720h"
      privateKey  = { algorithm = "ECDSA", size = 256, rotationPolicy = "Always" }
      issuerRef   = { kind = "ClusterIssuer", name = "${var.name}-ca" }
    }
  })
  depends_on = [kubectl_manifest.ca_issuer]
}

# The admin API's HTTPS certificate (the overlay's Secret meridian-scheduler-admin-tls): reached
# in the cluster by its Service or through `kubectl port-forward` (https://127.0.0.1:7071), the
# names it carries. The admin API reloads it when cert-manager renews it.
resource "kubectl_manifest" "scheduler_admin_certificate" {
  yaml_body = yamlencode({
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata   = { name = "meridian-scheduler-admin", namespace = kubernetes_namespace.this.metadata[0].name }
    spec = {
      secretName  = "meridian-scheduler-admin-tls"
      dnsNames    = ["meridian-scheduler.${var.namespace}.svc", "localhost"]
      ipAddresses = ["127.0.0.1"]
      duration    = "2160h"
      renewBefore = "720h"
      privateKey  = { algorithm = "ECDSA", size = 256, rotationPolicy = "Always" }
      issuerRef   = { kind = "ClusterIssuer", name = "${var.name}-ca" }
    }
  })
  depends_on = [kubectl_manifest.ca_issuer]
}
