# The agent's Google service account, bound to its Kubernetes ServiceAccount through Workload
# Identity, with exactly the permissions agents/providers/gcp.py uses (tests/terraform/test_iam.py
# compares them with the provider's calls):
# - GKE (ClusterManager): list_node_pools and get_node_pool -> container.clusters.get;
#   set_node_pool_size and set_node_pool_autoscaling -> container.clusters.update; get_operation ->
#   container.operations.get. GKE's IAM has no scope below the project (no per-cluster or
#   per-node-pool grant, and no IAM Conditions on container resources), so this role is bound on
#   the project: put Meridian's clusters in a project of their own to keep it to them.
# - Compute Engine (REST): instanceGroupManagers.get and .listManagedInstances ->
#   compute.instanceGroupManagers.get, bound with an IAM Condition to this cluster's own GPU
#   pools' managed instance groups; regions.get (the region's GPU quotas) -> compute.regions.get,
#   read-only region metadata that has no narrower scope.

resource "google_service_account" "agent" {
  project      = var.project
  account_id   = "${local.name}-agent"
  display_name = "Meridian agent of ${var.cluster_id}"
}

resource "google_project_iam_custom_role" "agent_gke" {
  project     = var.project
  role_id     = "meridianAgentGke_${replace(var.cluster_id, "-", "_")}"
  title       = "Meridian agent ${var.cluster_id}: GKE node pools"
  permissions = ["container.clusters.get", "container.clusters.update", "container.operations.get"]
}

resource "google_project_iam_custom_role" "agent_migs" {
  project     = var.project
  role_id     = "meridianAgentMigs_${replace(var.cluster_id, "-", "_")}"
  title       = "Meridian agent ${var.cluster_id}: node pool instance groups"
  permissions = ["compute.instanceGroupManagers.get"]
}

resource "google_project_iam_custom_role" "agent_quota" {
  project     = var.project
  role_id     = "meridianAgentQuota_${replace(var.cluster_id, "-", "_")}"
  title       = "Meridian agent ${var.cluster_id}: region GPU quotas"
  permissions = ["compute.regions.get"]
}

locals {
  agent_member = "serviceAccount:${google_service_account.agent.email}"
  # projects/P/zones/Z/instanceGroupManagers/NAME of every GPU pool (the IAM Condition's resource.name).
  pool_migs = flatten([
    for np in google_container_node_pool.gpu : [
      for url in np.managed_instance_group_urls : regex("projects/.+$", url)
    ]
  ])
}

resource "google_project_iam_member" "agent_gke" {
  project = var.project
  role    = google_project_iam_custom_role.agent_gke.name
  member  = local.agent_member
}

resource "google_project_iam_member" "agent_migs" {
  project = var.project
  role    = google_project_iam_custom_role.agent_migs.name
  member  = local.agent_member
  condition {
    title       = "meridian-${var.cluster_id}-gpu-pools"
    description = "Only the managed instance groups of ${local.name}'s GPU node pools"
    expression  = join(" || ", [for mig in local.pool_migs : "resource.name == \"${mig}\""])
  }
}

resource "google_project_iam_member" "agent_quota" {
  project = var.project
  role    = google_project_iam_custom_role.agent_quota.name
  member  = local.agent_member
}

resource "google_service_account_iam_member" "agent_workload_identity" {
  service_account_id = google_service_account.agent.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${var.project}.svc.id.goog[${var.namespace}/meridian-agent]"
}
