output "endpoint" {
  description = "URL of this region's OpenAI-compatible endpoint (point hostname's DNS record at the Service's load balancer); http: the routers serve no TLS themselves."
  value       = "http://${var.hostname}/v1"
}

output "namespace" {
  description = "Namespace of the routers."
  value       = kubernetes_namespace.this.metadata[0].name
}
