# One Meridian fleet on three clouds, as examples/clusters.yaml declares it: nine GPU clusters
# (EKS, GKE, AKS; the same regions, zones, pools, instance types, tiers and node bounds: a test
# checks it), the control plane on the us-east-1 EKS cluster with ElastiCache, and routers for the
# client regions behind regional load balancers. docs/operations.md walks through it.

locals {
  manifests = "${path.root}/../../../deploy/kubernetes"
}

module "aws_use1" {
  source = "../../modules/eks-gpu-cluster"
  providers = {
    aws           = aws.us_east_1
    kubernetes    = kubernetes.aws_use1
    helm          = helm.aws_use1
    kustomization = kustomization.aws_use1
  }

  cluster_id        = "aws-use1"
  region            = "us-east-1"
  zone              = "us-east-1a"
  subnet_ids        = var.aws_subnet_ids["aws-use1"]
  token_secret_arn  = var.aws_token_secret_arns["aws-use1"]
  scheduler_address = module.control_plane.scheduler_address
  scheduler_ca_pem  = module.control_plane.ca_pem
  agent_image       = var.control_plane_image
  replica_image     = var.replica_image
  manifests_path    = local.manifests
  pools = [
    { name = "l4", instance_type = "g6.xlarge", tier = "on_demand", min_nodes = 0, max_nodes = 8 },
    { name = "l4-spot", instance_type = "g6.xlarge", tier = "spot", min_nodes = 0, max_nodes = 8 },
    { name = "a10g", instance_type = "g5.xlarge", tier = "on_demand", min_nodes = 0, max_nodes = 6 },
    { name = "h100", instance_type = "p5.48xlarge", tier = "reserved", min_nodes = 1, max_nodes = 1 },
    { name = "h100-od", instance_type = "p5.48xlarge", tier = "on_demand", min_nodes = 0, max_nodes = 2 },
  ]
}

module "aws_euw1" {
  source = "../../modules/eks-gpu-cluster"
  providers = {
    aws           = aws.eu_west_1
    kubernetes    = kubernetes.aws_euw1
    helm          = helm.aws_euw1
    kustomization = kustomization.aws_euw1
  }

  cluster_id        = "aws-euw1"
  region            = "eu-west-1"
  zone              = "eu-west-1b"
  subnet_ids        = var.aws_subnet_ids["aws-euw1"]
  token_secret_arn  = var.aws_token_secret_arns["aws-euw1"]
  scheduler_address = module.control_plane.scheduler_address
  scheduler_ca_pem  = module.control_plane.ca_pem
  agent_image       = var.control_plane_image
  replica_image     = var.replica_image
  manifests_path    = local.manifests
  pools = [
    { name = "l4", instance_type = "g6.xlarge", tier = "on_demand", min_nodes = 0, max_nodes = 8 },
    { name = "l40s-spot", instance_type = "g6e.xlarge", tier = "spot", min_nodes = 0, max_nodes = 4 },
    { name = "h100", instance_type = "p5.48xlarge", tier = "on_demand", min_nodes = 0, max_nodes = 1 },
  ]
}

module "aws_aps1" {
  source = "../../modules/eks-gpu-cluster"
  providers = {
    aws           = aws.ap_south_1
    kubernetes    = kubernetes.aws_aps1
    helm          = helm.aws_aps1
    kustomization = kustomization.aws_aps1
  }

  cluster_id        = "aws-aps1"
  region            = "ap-south-1"
  zone              = "ap-south-1a"
  subnet_ids        = var.aws_subnet_ids["aws-aps1"]
  token_secret_arn  = var.aws_token_secret_arns["aws-aps1"]
  scheduler_address = module.control_plane.scheduler_address
  scheduler_ca_pem  = module.control_plane.ca_pem
  agent_image       = var.control_plane_image
  replica_image     = var.replica_image
  manifests_path    = local.manifests
  pools = [
    { name = "l4", instance_type = "g6.xlarge", tier = "on_demand", min_nodes = 0, max_nodes = 6 },
    { name = "l4-spot", instance_type = "g6.xlarge", tier = "spot", min_nodes = 0, max_nodes = 6 },
  ]
}

module "gcp_usc1" {
  source = "../../modules/gke-gpu-cluster"
  providers = {
    kubernetes    = kubernetes.gcp_usc1
    kustomization = kustomization.gcp_usc1
  }

  cluster_id        = "gcp-usc1"
  project           = var.gcp_project
  region            = "us-central1"
  zone              = "us-central1-a"
  network           = var.gcp_networks["gcp-usc1"].network
  subnetwork        = var.gcp_networks["gcp-usc1"].subnetwork
  token_secret_id   = "meridian-token-gcp-usc1"
  scheduler_address = module.control_plane.scheduler_address
  scheduler_ca_pem  = module.control_plane.ca_pem
  agent_image       = var.control_plane_image
  replica_image     = var.replica_image
  manifests_path    = local.manifests
  pools = [
    { name = "l4", instance_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 1, tier = "on_demand", min_nodes = 0, max_nodes = 8 },
    { name = "l4-spot", instance_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 1, tier = "spot", min_nodes = 0, max_nodes = 8 },
    { name = "h100", instance_type = "a3-highgpu-8g", accelerator_type = "nvidia-h100-80gb", accelerator_count = 8, tier = "on_demand", min_nodes = 0, max_nodes = 1 },
  ]
}

module "gcp_euw4" {
  source = "../../modules/gke-gpu-cluster"
  providers = {
    kubernetes    = kubernetes.gcp_euw4
    kustomization = kustomization.gcp_euw4
  }

  cluster_id        = "gcp-euw4"
  project           = var.gcp_project
  region            = "europe-west4"
  zone              = "europe-west4-a"
  network           = var.gcp_networks["gcp-euw4"].network
  subnetwork        = var.gcp_networks["gcp-euw4"].subnetwork
  token_secret_id   = "meridian-token-gcp-euw4"
  scheduler_address = module.control_plane.scheduler_address
  scheduler_ca_pem  = module.control_plane.ca_pem
  agent_image       = var.control_plane_image
  replica_image     = var.replica_image
  manifests_path    = local.manifests
  pools = [
    { name = "l4", instance_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 1, tier = "on_demand", min_nodes = 0, max_nodes = 8 },
    { name = "l4-spot", instance_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 1, tier = "spot", min_nodes = 0, max_nodes = 8 },
  ]
}

module "gcp_ane1" {
  source = "../../modules/gke-gpu-cluster"
  providers = {
    kubernetes    = kubernetes.gcp_ane1
    kustomization = kustomization.gcp_ane1
  }

  cluster_id        = "gcp-ane1"
  project           = var.gcp_project
  region            = "asia-northeast1"
  zone              = "asia-northeast1-a"
  network           = var.gcp_networks["gcp-ane1"].network
  subnetwork        = var.gcp_networks["gcp-ane1"].subnetwork
  token_secret_id   = "meridian-token-gcp-ane1"
  scheduler_address = module.control_plane.scheduler_address
  scheduler_ca_pem  = module.control_plane.ca_pem
  agent_image       = var.control_plane_image
  replica_image     = var.replica_image
  manifests_path    = local.manifests
  pools = [
    { name = "l4", instance_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 1, tier = "on_demand", min_nodes = 0, max_nodes = 6 },
    { name = "l4-spot", instance_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 1, tier = "spot", min_nodes = 0, max_nodes = 6 },
  ]
}

module "azure_eus2" {
  source = "../../modules/aks-gpu-cluster"
  providers = {
    kubernetes    = kubernetes.azure_eus2
    helm          = helm.azure_eus2
    kustomization = kustomization.azure_eus2
  }

  cluster_id                 = "azure-eus2"
  resource_group_name        = var.azure_resource_group
  location                   = "eastus2"
  zone                       = "1"
  subnet_id                  = var.azure_subnet_ids["azure-eus2"]
  log_analytics_workspace_id = var.azure_log_analytics_workspace_id
  disk_encryption_set_id     = var.azure_disk_encryption_set_id
  key_vault_id               = var.azure_key_vault_id
  token_secret_name          = "meridian-token-azure-eus2"
  scheduler_address          = module.control_plane.scheduler_address
  scheduler_ca_pem           = module.control_plane.ca_pem
  agent_image                = var.control_plane_image
  replica_image              = var.replica_image
  manifests_path             = local.manifests
  pools = [
    { name = "a10", instance_type = "Standard_NV36ads_A10_v5", tier = "on_demand", min_nodes = 0, max_nodes = 6 },
    { name = "a100", instance_type = "Standard_NC24ads_A100_v4", tier = "on_demand", min_nodes = 0, max_nodes = 4 },
    { name = "h100", instance_type = "Standard_ND96isr_H100_v5", tier = "on_demand", min_nodes = 0, max_nodes = 1 },
  ]
}

module "azure_weu" {
  source = "../../modules/aks-gpu-cluster"
  providers = {
    kubernetes    = kubernetes.azure_weu
    helm          = helm.azure_weu
    kustomization = kustomization.azure_weu
  }

  cluster_id                 = "azure-weu"
  resource_group_name        = var.azure_resource_group
  location                   = "westeurope"
  zone                       = "1"
  subnet_id                  = var.azure_subnet_ids["azure-weu"]
  log_analytics_workspace_id = var.azure_log_analytics_workspace_id
  disk_encryption_set_id     = var.azure_disk_encryption_set_id
  key_vault_id               = var.azure_key_vault_id
  token_secret_name          = "meridian-token-azure-weu"
  scheduler_address          = module.control_plane.scheduler_address
  scheduler_ca_pem           = module.control_plane.ca_pem
  agent_image                = var.control_plane_image
  replica_image              = var.replica_image
  manifests_path             = local.manifests
  pools = [
    { name = "a10", instance_type = "Standard_NV36ads_A10_v5", tier = "on_demand", min_nodes = 0, max_nodes = 6 },
    { name = "a10-spot", instance_type = "Standard_NV36ads_A10_v5", tier = "spot", min_nodes = 0, max_nodes = 6 },
  ]
}

module "azure_jpe" {
  source = "../../modules/aks-gpu-cluster"
  providers = {
    kubernetes    = kubernetes.azure_jpe
    helm          = helm.azure_jpe
    kustomization = kustomization.azure_jpe
  }

  cluster_id                 = "azure-jpe"
  resource_group_name        = var.azure_resource_group
  location                   = "japaneast"
  zone                       = "1"
  subnet_id                  = var.azure_subnet_ids["azure-jpe"]
  log_analytics_workspace_id = var.azure_log_analytics_workspace_id
  disk_encryption_set_id     = var.azure_disk_encryption_set_id
  key_vault_id               = var.azure_key_vault_id
  token_secret_name          = "meridian-token-azure-jpe"
  scheduler_address          = module.control_plane.scheduler_address
  scheduler_ca_pem           = module.control_plane.ca_pem
  agent_image                = var.control_plane_image
  replica_image              = var.replica_image
  manifests_path             = local.manifests
  pools = [
    { name = "a10", instance_type = "Standard_NV36ads_A10_v5", tier = "on_demand", min_nodes = 0, max_nodes = 4 },
    { name = "a100-spot", instance_type = "Standard_NC24ads_A100_v4", tier = "spot", min_nodes = 0, max_nodes = 4 },
  ]
}
