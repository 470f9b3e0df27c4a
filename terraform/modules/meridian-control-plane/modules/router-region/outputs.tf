output "endpoint" {
  description = "https URL of this region's OpenAI-compatible endpoint (point hostname's DNS record at the Service's load balancer)."
  value       = "https://${var.hostname}/v1"
}

output "namespace" {
  description = "Namespace of the routers."
  value       = kubernetes_namespace.this.metadata[0].name
}
