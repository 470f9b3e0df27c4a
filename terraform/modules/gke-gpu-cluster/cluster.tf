# A private, VPC-native GKE cluster with Workload Identity, shielded nodes and a small system pool;
# the GPU pools are in nodes.tf. GKE installs the NVIDIA driver and device plugin itself
# (gpu_driver_installation_config), so nothing else is deployed for GPUs.

locals {
  name   = "meridian-${var.cluster_id}"
  labels = merge(var.labels, { "meridian-cluster" = var.cluster_id, "part-of" = "meridian" })
}

resource "google_service_account" "nodes" {
  project      = var.project
  account_id   = "${local.name}-nodes"
  display_name = "Nodes of ${local.name}"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset(["roles/logging.logWriter", "roles/monitoring.metricWriter", "roles/monitoring.viewer",
  "roles/artifactregistry.reader"])
  project = var.project
  role    = each.value
  member  = "serviceAccount:${google_service_account.nodes.email}"
}

resource "google_container_cluster" "this" {
  #checkov:skip=CKV_GCP_21:resource_labels is set (local.labels: the caller's labels and Meridian's), a merge checkov does not evaluate.
  #checkov:skip=CKV_GCP_65:RBAC for people is the organisation's (Google Groups need its domain); the agent authenticates with Workload Identity.
  project  = var.project
  name     = local.name
  location = var.region
  # GPU pools are zonal: the cluster's nodes live in the Cluster spec's zone.
  node_locations = [var.zone]

  network    = var.network
  subnetwork = var.subnetwork
  ip_allocation_policy {
    cluster_secondary_range_name  = var.pods_range_name
    services_secondary_range_name = var.services_range_name
  }

  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = true

  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = length(var.authorized_networks) == 0
    master_ipv4_cidr_block  = var.master_ipv4_cidr_block
  }

  master_authorized_networks_config {
    dynamic "cidr_blocks" {
      for_each = var.authorized_networks
      content {
        cidr_block   = cidr_blocks.value.cidr
        display_name = cidr_blocks.value.name
      }
    }
  }

  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }

  workload_identity_config {
    workload_pool = "${var.project}.svc.id.goog"
  }

  release_channel {
    channel = var.release_channel
  }

  network_policy {
    enabled = true
  }

  binary_authorization {
    evaluation_mode = "PROJECT_SINGLETON_POLICY_ENFORCE"
  }

  enable_shielded_nodes       = true
  enable_intranode_visibility = true
  enable_legacy_abac          = false
  resource_labels             = local.labels

  logging_service    = "logging.googleapis.com/kubernetes"
  monitoring_service = "monitoring.googleapis.com/kubernetes"

  node_config {
    service_account = google_service_account.nodes.email
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    metadata = { "disable-legacy-endpoints" = "true" }
  }
}

resource "google_container_node_pool" "system" {
  project  = var.project
  name     = "system"
  cluster  = google_container_cluster.this.id
  location = var.region

  node_count = 1
  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = var.system_machine_type
    image_type      = "COS_CONTAINERD"
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    labels          = { "meridian.dev/role" = "system" }
    resource_labels = local.labels
    metadata        = { "disable-legacy-endpoints" = "true" }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }
}
