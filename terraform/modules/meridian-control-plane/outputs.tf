output "ca_pem" {
  description = "PEM of the fleet CA that signs the scheduler's certificate: every agent module's scheduler_ca_pem."
  value       = tls_self_signed_cert.ca.cert_pem
}

output "ca_issuer" {
  description = "Name of the cert-manager ClusterIssuer of the fleet CA (on the control plane's cluster)."
  value       = "${var.name}-ca"
}

output "scheduler_address" {
  description = "host:port agents and routers dial (point scheduler_hostname's DNS record at the scheduler Service's load balancer)."
  value       = "${var.scheduler_hostname}:7070"
}

output "namespace" {
  description = "Namespace of the scheduler."
  value       = kubernetes_namespace.this.metadata[0].name
}

output "redis_endpoint" {
  description = "Primary endpoint of the ElastiCache replication group (empty unless redis_mode = elasticache)."
  value       = local.elasticache ? aws_elasticache_replication_group.redis[0].primary_endpoint_address : ""
}
