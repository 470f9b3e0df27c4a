# One provider configuration per cloud region and per Kubernetes cluster (Terraform cannot
# iterate over provider configurations). Kubernetes credentials are short-lived tokens from each
# cloud's own API; nothing here is a secret value.

provider "google" {
  project = var.gcp_project
}

provider "azurerm" {
  features {}
  subscription_id = var.azure_subscription_id
}

data "google_client_config" "current" {}

provider "aws" {
  alias  = "us_east_1"
  region = "us-east-1"
}

provider "aws" {
  alias  = "eu_west_1"
  region = "eu-west-1"
}

provider "aws" {
  alias  = "ap_south_1"
  region = "ap-south-1"
}

data "aws_eks_cluster_auth" "aws_use1" {
  provider = aws.us_east_1
  name     = module.aws_use1.cluster_name
}

provider "kubernetes" {
  alias                  = "aws_use1"
  host                   = module.aws_use1.cluster_endpoint
  cluster_ca_certificate = base64decode(module.aws_use1.cluster_ca_certificate)
  token                  = data.aws_eks_cluster_auth.aws_use1.token
}

provider "helm" {
  alias = "aws_use1"
  kubernetes {
    host                   = module.aws_use1.cluster_endpoint
    cluster_ca_certificate = base64decode(module.aws_use1.cluster_ca_certificate)
    token                  = data.aws_eks_cluster_auth.aws_use1.token
  }
}

provider "kustomization" {
  alias = "aws_use1"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "aws_use1"
    clusters   = [{ name = "aws_use1", cluster = { server = module.aws_use1.cluster_endpoint, certificate-authority-data = module.aws_use1.cluster_ca_certificate } }]
    contexts   = [{ name = "aws_use1", context = { cluster = "aws_use1", user = "aws_use1" } }]
    users      = [{ name = "aws_use1", user = { token = data.aws_eks_cluster_auth.aws_use1.token } }]
  })
}

data "aws_eks_cluster_auth" "aws_euw1" {
  provider = aws.eu_west_1
  name     = module.aws_euw1.cluster_name
}

provider "kubernetes" {
  alias                  = "aws_euw1"
  host                   = module.aws_euw1.cluster_endpoint
  cluster_ca_certificate = base64decode(module.aws_euw1.cluster_ca_certificate)
  token                  = data.aws_eks_cluster_auth.aws_euw1.token
}

provider "helm" {
  alias = "aws_euw1"
  kubernetes {
    host                   = module.aws_euw1.cluster_endpoint
    cluster_ca_certificate = base64decode(module.aws_euw1.cluster_ca_certificate)
    token                  = data.aws_eks_cluster_auth.aws_euw1.token
  }
}

provider "kustomization" {
  alias = "aws_euw1"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "aws_euw1"
    clusters   = [{ name = "aws_euw1", cluster = { server = module.aws_euw1.cluster_endpoint, certificate-authority-data = module.aws_euw1.cluster_ca_certificate } }]
    contexts   = [{ name = "aws_euw1", context = { cluster = "aws_euw1", user = "aws_euw1" } }]
    users      = [{ name = "aws_euw1", user = { token = data.aws_eks_cluster_auth.aws_euw1.token } }]
  })
}

data "aws_eks_cluster_auth" "aws_aps1" {
  provider = aws.ap_south_1
  name     = module.aws_aps1.cluster_name
}

provider "kubernetes" {
  alias                  = "aws_aps1"
  host                   = module.aws_aps1.cluster_endpoint
  cluster_ca_certificate = base64decode(module.aws_aps1.cluster_ca_certificate)
  token                  = data.aws_eks_cluster_auth.aws_aps1.token
}

provider "helm" {
  alias = "aws_aps1"
  kubernetes {
    host                   = module.aws_aps1.cluster_endpoint
    cluster_ca_certificate = base64decode(module.aws_aps1.cluster_ca_certificate)
    token                  = data.aws_eks_cluster_auth.aws_aps1.token
  }
}

provider "kustomization" {
  alias = "aws_aps1"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "aws_aps1"
    clusters   = [{ name = "aws_aps1", cluster = { server = module.aws_aps1.cluster_endpoint, certificate-authority-data = module.aws_aps1.cluster_ca_certificate } }]
    contexts   = [{ name = "aws_aps1", context = { cluster = "aws_aps1", user = "aws_aps1" } }]
    users      = [{ name = "aws_aps1", user = { token = data.aws_eks_cluster_auth.aws_aps1.token } }]
  })
}

provider "kubernetes" {
  alias                  = "gcp_usc1"
  host                   = "https://${module.gcp_usc1.cluster_endpoint}"
  cluster_ca_certificate = base64decode(module.gcp_usc1.cluster_ca_certificate)
  token                  = data.google_client_config.current.access_token
}

provider "kustomization" {
  alias = "gcp_usc1"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "gcp_usc1"
    clusters   = [{ name = "gcp_usc1", cluster = { server = "https://${module.gcp_usc1.cluster_endpoint}", certificate-authority-data = module.gcp_usc1.cluster_ca_certificate } }]
    contexts   = [{ name = "gcp_usc1", context = { cluster = "gcp_usc1", user = "gcp_usc1" } }]
    users      = [{ name = "gcp_usc1", user = { token = data.google_client_config.current.access_token } }]
  })
}

provider "kubernetes" {
  alias                  = "gcp_euw4"
  host                   = "https://${module.gcp_euw4.cluster_endpoint}"
  cluster_ca_certificate = base64decode(module.gcp_euw4.cluster_ca_certificate)
  token                  = data.google_client_config.current.access_token
}

provider "kustomization" {
  alias = "gcp_euw4"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "gcp_euw4"
    clusters   = [{ name = "gcp_euw4", cluster = { server = "https://${module.gcp_euw4.cluster_endpoint}", certificate-authority-data = module.gcp_euw4.cluster_ca_certificate } }]
    contexts   = [{ name = "gcp_euw4", context = { cluster = "gcp_euw4", user = "gcp_euw4" } }]
    users      = [{ name = "gcp_euw4", user = { token = data.google_client_config.current.access_token } }]
  })
}

provider "kubernetes" {
  alias                  = "gcp_ane1"
  host                   = "https://${module.gcp_ane1.cluster_endpoint}"
  cluster_ca_certificate = base64decode(module.gcp_ane1.cluster_ca_certificate)
  token                  = data.google_client_config.current.access_token
}

provider "kustomization" {
  alias = "gcp_ane1"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "gcp_ane1"
    clusters   = [{ name = "gcp_ane1", cluster = { server = "https://${module.gcp_ane1.cluster_endpoint}", certificate-authority-data = module.gcp_ane1.cluster_ca_certificate } }]
    contexts   = [{ name = "gcp_ane1", context = { cluster = "gcp_ane1", user = "gcp_ane1" } }]
    users      = [{ name = "gcp_ane1", user = { token = data.google_client_config.current.access_token } }]
  })
}

provider "kubernetes" {
  alias                  = "azure_eus2"
  host                   = module.azure_eus2.kube_host
  cluster_ca_certificate = base64decode(module.azure_eus2.cluster_ca_certificate)
  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "kubelogin"
    args        = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
  }
}

provider "helm" {
  alias = "azure_eus2"
  kubernetes {
    host                   = module.azure_eus2.kube_host
    cluster_ca_certificate = base64decode(module.azure_eus2.cluster_ca_certificate)
    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "kubelogin"
      args        = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
    }
  }
}

provider "kustomization" {
  alias = "azure_eus2"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "azure_eus2"
    clusters   = [{ name = "azure_eus2", cluster = { server = module.azure_eus2.kube_host, certificate-authority-data = module.azure_eus2.cluster_ca_certificate } }]
    contexts   = [{ name = "azure_eus2", context = { cluster = "azure_eus2", user = "azure_eus2" } }]
    users = [{ name = "azure_eus2", user = { exec = { apiVersion = "client.authentication.k8s.io/v1beta1", command = "kubelogin",
    args = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"] } } }]
  })
}

provider "kubernetes" {
  alias                  = "azure_weu"
  host                   = module.azure_weu.kube_host
  cluster_ca_certificate = base64decode(module.azure_weu.cluster_ca_certificate)
  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "kubelogin"
    args        = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
  }
}

provider "helm" {
  alias = "azure_weu"
  kubernetes {
    host                   = module.azure_weu.kube_host
    cluster_ca_certificate = base64decode(module.azure_weu.cluster_ca_certificate)
    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "kubelogin"
      args        = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
    }
  }
}

provider "kustomization" {
  alias = "azure_weu"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "azure_weu"
    clusters   = [{ name = "azure_weu", cluster = { server = module.azure_weu.kube_host, certificate-authority-data = module.azure_weu.cluster_ca_certificate } }]
    contexts   = [{ name = "azure_weu", context = { cluster = "azure_weu", user = "azure_weu" } }]
    users = [{ name = "azure_weu", user = { exec = { apiVersion = "client.authentication.k8s.io/v1beta1", command = "kubelogin",
    args = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"] } } }]
  })
}

provider "kubernetes" {
  alias                  = "azure_jpe"
  host                   = module.azure_jpe.kube_host
  cluster_ca_certificate = base64decode(module.azure_jpe.cluster_ca_certificate)
  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "kubelogin"
    args        = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
  }
}

provider "helm" {
  alias = "azure_jpe"
  kubernetes {
    host                   = module.azure_jpe.kube_host
    cluster_ca_certificate = base64decode(module.azure_jpe.cluster_ca_certificate)
    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "kubelogin"
      args        = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
    }
  }
}

provider "kustomization" {
  alias = "azure_jpe"
  kubeconfig_raw = yamlencode({
    apiVersion = "v1", kind = "Config", current-context = "azure_jpe"
    clusters   = [{ name = "azure_jpe", cluster = { server = module.azure_jpe.kube_host, certificate-authority-data = module.azure_jpe.cluster_ca_certificate } }]
    contexts   = [{ name = "azure_jpe", context = { cluster = "azure_jpe", user = "azure_jpe" } }]
    users = [{ name = "azure_jpe", user = { exec = { apiVersion = "client.authentication.k8s.io/v1beta1", command = "kubelogin",
    args = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"] } } }]
  })
}

provider "kubectl" {
  alias                  = "aws_use1"
  host                   = module.aws_use1.cluster_endpoint
  cluster_ca_certificate = base64decode(module.aws_use1.cluster_ca_certificate)
  token                  = data.aws_eks_cluster_auth.aws_use1.token
  load_config_file       = false
}

provider "kubectl" {
  alias                  = "aws_euw1"
  host                   = module.aws_euw1.cluster_endpoint
  cluster_ca_certificate = base64decode(module.aws_euw1.cluster_ca_certificate)
  token                  = data.aws_eks_cluster_auth.aws_euw1.token
  load_config_file       = false
}

provider "kubectl" {
  alias                  = "gcp_ane1"
  host                   = "https://${module.gcp_ane1.cluster_endpoint}"
  cluster_ca_certificate = base64decode(module.gcp_ane1.cluster_ca_certificate)
  token                  = data.google_client_config.current.access_token
  load_config_file       = false
}
