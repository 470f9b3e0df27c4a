# One GKE node pool per Meridian pool: the accelerator and its count, spot for spot pools, GKE's
# own driver install. The pool's size belongs to the agent (set_node_pool_size): no GKE autoscaler,
# and Terraform ignores the node count after creation.

locals {
  pools = { for p in var.pools : p.name => p }
}

resource "google_container_node_pool" "gpu" {
  for_each = local.pools
  project  = var.project
  name     = each.key
  cluster  = google_container_cluster.this.id
  location = var.region

  node_locations = [var.zone]
  node_count     = each.value.min_nodes

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = each.value.instance_type
    image_type      = "COS_CONTAINERD"
    disk_size_gb    = each.value.disk_size_gb
    spot            = each.value.tier == "spot"
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    labels = {
      "meridian.dev/cluster" = var.cluster_id
      "meridian.dev/pool"    = each.key
      "meridian.dev/tier"    = each.value.tier
    }
    resource_labels = local.labels
    metadata        = { "disable-legacy-endpoints" = "true" }

    guest_accelerator {
      type  = each.value.accelerator_type
      count = each.value.accelerator_count
      gpu_driver_installation_config {
        gpu_driver_version = "LATEST"
      }
    }

    dynamic "reservation_affinity" {
      for_each = each.value.tier == "reserved" ? [1] : []
      content {
        consume_reservation_type = "ANY_RESERVATION"
      }
    }

    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }

  lifecycle {
    ignore_changes = [node_count]
  }
}
