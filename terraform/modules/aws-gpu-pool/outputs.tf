output "asg_name" {
  description = "Put this in the Cluster spec as the pool's `resource`."
  value       = aws_autoscaling_group.pool.name
}

output "asg_arn" {
  description = "ARN of the Auto Scaling group (the agent's IAM policy is scoped to it)."
  value       = aws_autoscaling_group.pool.arn
}

output "launch_template_id" {
  description = "Launch template of the group's instances."
  value       = aws_launch_template.pool.id
}
