output "cluster_name" {
  description = "EKS cluster name."
  value       = aws_eks_cluster.this.name
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint (for the kubernetes, helm and kustomization providers)."
  value       = aws_eks_cluster.this.endpoint
}

output "cluster_ca_certificate" {
  description = "Base64 PEM of the cluster's CA."
  value       = aws_eks_cluster.this.certificate_authority[0].data
}

output "agent_role_arn" {
  description = "IAM role of the agent's ServiceAccount (IRSA)."
  value       = aws_iam_role.agent.arn
}

output "agent_policy_json" {
  description = "The agent's IAM policy, as granted."
  value       = data.aws_iam_policy_document.agent.json
}

output "pool_resources" {
  description = "Pool name -> Auto Scaling group name (the pools' `resource` in the Cluster spec)."
  value       = { for name, p in module.gpu_pool : name => p.asg_name }
}

output "cluster_spec_yaml" {
  description = "The agent's Cluster spec as installed (apply it to the scheduler too: meridian apply -f)."
  value       = yamlencode(local.cluster_spec)
}

output "agent_token_digest" {
  description = "sha256:<hex> digest of this cluster's agent token, for the scheduler's tokens file (the control plane module's cluster_token_digests); sensitive because the token is."
  value       = "sha256:${sha256(kubernetes_secret.agent_token.data.token)}"
  sensitive   = true
}
