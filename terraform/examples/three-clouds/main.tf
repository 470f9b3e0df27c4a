# The control plane (scheduler + ElastiCache, on aws-use1's EKS cluster) and one router region per
# client region, each on the cluster nearest its clients.

module "control_plane" {
  source = "../../modules/meridian-control-plane"
  providers = {
    aws           = aws.us_east_1
    kubernetes    = kubernetes.aws_use1
    helm          = helm.aws_use1
    kubectl       = kubectl.aws_use1
    kustomization = kustomization.aws_use1
  }

  scheduler_hostname        = var.scheduler_hostname
  scheduler_image           = var.control_plane_image
  redis_mode                = "elasticache"
  vpc_id                    = var.aws_vpc_ids["aws-use1"]
  subnet_ids                = var.aws_subnet_ids["aws-use1"]
  cluster_security_group_id = var.aws_cluster_security_group_ids["aws-use1"]
  admin_token_secret_arn    = var.admin_token_secret_arn
  cluster_token_digests     = local.cluster_token_digests
  router_token_digests      = [for r in values(local.routers) : "sha256:${sha256(r.token)}"]
  manifests_path            = local.manifests
}

# Router tokens, each from the secret store of the cloud its routers run in.
data "aws_secretsmanager_secret_version" "router_token_na_east" {
  provider  = aws.us_east_1
  secret_id = var.router_token_secret_arns["na-east"]
}

data "aws_secretsmanager_secret_version" "router_token_eu_west" {
  provider  = aws.eu_west_1
  secret_id = var.router_token_secret_arns["eu-west"]
}

data "google_secret_manager_secret_version" "router_token_ap_northeast" {
  secret = "meridian-router-token-ap-northeast"
}

locals {
  routers = {
    "na-east"      = { token = data.aws_secretsmanager_secret_version.router_token_na_east.secret_string }
    "eu-west"      = { token = data.aws_secretsmanager_secret_version.router_token_eu_west.secret_string }
    "ap-northeast" = { token = data.google_secret_manager_secret_version.router_token_ap_northeast.secret_data }
  }
  # One token per cluster: each GPU cluster module reads its own from its cloud's secret store and
  # hands on only its digest, which is all the scheduler's tokens file holds.
  cluster_token_digests = {
    "aws-use1"   = module.aws_use1.agent_token_digest
    "aws-euw1"   = module.aws_euw1.agent_token_digest
    "aws-aps1"   = module.aws_aps1.agent_token_digest
    "gcp-usc1"   = module.gcp_usc1.agent_token_digest
    "gcp-euw4"   = module.gcp_euw4.agent_token_digest
    "gcp-ane1"   = module.gcp_ane1.agent_token_digest
    "azure-eus2" = module.azure_eus2.agent_token_digest
    "azure-weu"  = module.azure_weu.agent_token_digest
    "azure-jpe"  = module.azure_jpe.agent_token_digest
  }
  nlb = {
    "service.beta.kubernetes.io/aws-load-balancer-type"            = "external"
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
    "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internet-facing"
  }
}

resource "kubernetes_secret" "router_token_na_east" {
  provider = kubernetes.aws_use1
  metadata {
    name      = "meridian-router-token"
    namespace = module.routers_na_east.namespace
  }
  data = { token = local.routers["na-east"].token }
}

resource "kubernetes_secret" "router_token_eu_west" {
  provider = kubernetes.aws_euw1
  metadata {
    name      = "meridian-router-token"
    namespace = module.routers_eu_west.namespace
  }
  data = { token = local.routers["eu-west"].token }
}

resource "kubernetes_secret" "router_token_ap_northeast" {
  provider = kubernetes.gcp_ane1
  metadata {
    name      = "meridian-router-token"
    namespace = module.routers_ap_northeast.namespace
  }
  data = { token = local.routers["ap-northeast"].token }
}

module "routers_na_east" {
  source = "../../modules/meridian-control-plane/modules/router-region"
  providers = {
    kubernetes    = kubernetes.aws_use1
    kubectl       = kubectl.aws_use1
    kustomization = kustomization.aws_use1
  }

  client_region             = "na-east"
  image                     = var.control_plane_image
  hostname                  = "na-east.${var.endpoint_domain}"
  certificate_issuer        = var.router_certificate_issuer
  scheduler_address         = module.control_plane.scheduler_address
  scheduler_ca_pem          = module.control_plane.ca_pem
  router_token_secret       = "meridian-router-token"
  load_balancer_annotations = local.nlb
  manifests_path            = local.manifests
}

module "routers_eu_west" {
  source = "../../modules/meridian-control-plane/modules/router-region"
  providers = {
    kubernetes    = kubernetes.aws_euw1
    kubectl       = kubectl.aws_euw1
    kustomization = kustomization.aws_euw1
  }

  client_region             = "eu-west"
  image                     = var.control_plane_image
  hostname                  = "eu-west.${var.endpoint_domain}"
  certificate_issuer        = var.router_certificate_issuer
  scheduler_address         = module.control_plane.scheduler_address
  scheduler_ca_pem          = module.control_plane.ca_pem
  router_token_secret       = "meridian-router-token"
  load_balancer_annotations = local.nlb
  manifests_path            = local.manifests
}

module "routers_ap_northeast" {
  source = "../../modules/meridian-control-plane/modules/router-region"
  providers = {
    kubernetes    = kubernetes.gcp_ane1
    kubectl       = kubectl.gcp_ane1
    kustomization = kustomization.gcp_ane1
  }

  client_region             = "ap-northeast"
  image                     = var.control_plane_image
  hostname                  = "ap-northeast.${var.endpoint_domain}"
  certificate_issuer        = var.router_certificate_issuer
  scheduler_address         = module.control_plane.scheduler_address
  scheduler_ca_pem          = module.control_plane.ca_pem
  router_token_secret       = "meridian-router-token"
  load_balancer_annotations = { "cloud.google.com/l4-rbs" = "enabled" }
  manifests_path            = local.manifests
}
