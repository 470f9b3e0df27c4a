output "scheduler_address" {
  description = "gRPC address of the scheduler (agents and routers dial it)."
  value       = module.control_plane.scheduler_address
}

output "endpoints" {
  description = "The OpenAI-compatible endpoint of each client region."
  value = {
    "na-east"      = module.routers_na_east.endpoint
    "eu-west"      = module.routers_eu_west.endpoint
    "ap-northeast" = module.routers_ap_northeast.endpoint
  }
}

output "cluster_specs" {
  description = "The Cluster spec of every agent, as installed: apply them to the scheduler (meridian apply -f)."
  value = join("---\n", [module.aws_use1.cluster_spec_yaml, module.aws_euw1.cluster_spec_yaml, module.aws_aps1.cluster_spec_yaml,
    module.gcp_usc1.cluster_spec_yaml, module.gcp_euw4.cluster_spec_yaml, module.gcp_ane1.cluster_spec_yaml,
  module.azure_eus2.cluster_spec_yaml, module.azure_weu.cluster_spec_yaml, module.azure_jpe.cluster_spec_yaml])
}

output "ca_pem" {
  description = "PEM of the fleet CA, which signs the scheduler's gRPC and admin API certificates (public data)."
  value       = module.control_plane.ca_pem
}
