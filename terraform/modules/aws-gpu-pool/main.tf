terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "cluster_id" {
  description = "Meridian cluster id (metadata.name of the Cluster spec)."
  type        = string
}

variable "pool_name" {
  description = "Pool name as in the Cluster spec's pools[].name."
  type        = string
}

variable "instance_type" {
  description = "GPU instance type, e.g. g6.xlarge or p5.48xlarge."
  type        = string
}

variable "ami_id" {
  description = "AMI with NVIDIA drivers and the Meridian agent (e.g. a Deep Learning AMI)."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets (one per availability zone) the group may launch into."
  type        = list(string)
}

variable "spot" {
  description = "Launch spot instances (interruptible, cheaper)."
  type        = bool
  default     = false
}

variable "min_nodes" {
  type    = number
  default = 0
}

variable "max_nodes" {
  type    = number
  default = 4
}

resource "aws_launch_template" "pool" {
  name_prefix   = "meridian-${var.cluster_id}-${var.pool_name}-"
  image_id      = var.ami_id
  instance_type = var.instance_type

  dynamic "instance_market_options" {
    for_each = var.spot ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        instance_interruption_behavior = "terminate"
      }
    }
  }

  metadata_options {
    http_tokens = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "meridian:cluster" = var.cluster_id
      "meridian:pool"    = var.pool_name
    }
  }
}

resource "aws_autoscaling_group" "pool" {
  name                = "meridian-${var.cluster_id}-${var.pool_name}"
  min_size            = var.min_nodes
  max_size            = var.max_nodes
  desired_capacity    = var.min_nodes
  vpc_zone_identifier = var.subnet_ids

  launch_template {
    id      = aws_launch_template.pool.id
    version = "$Latest"
  }

  # The agent owns desired capacity; Terraform must not reset it on every apply.
  lifecycle {
    ignore_changes = [desired_capacity]
  }

  tag {
    key                 = "meridian:cluster"
    value               = var.cluster_id
    propagate_at_launch = true
  }

  tag {
    key                 = "meridian:pool"
    value               = var.pool_name
    propagate_at_launch = true
  }
}

output "asg_name" {
  description = "Put this in the Cluster spec as the pool's `resource`."
  value       = aws_autoscaling_group.pool.name
}
