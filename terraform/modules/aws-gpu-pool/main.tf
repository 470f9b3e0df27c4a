locals {
  group_name = var.group_name != "" ? var.group_name : "meridian-${var.cluster_id}-${var.pool_name}"
  tags       = merge(var.tags, { "meridian:cluster" = var.cluster_id, "meridian:pool" = var.pool_name })
}

resource "aws_launch_template" "pool" {
  name_prefix            = "${local.group_name}-"
  image_id               = var.ami_id
  instance_type          = var.instance_type
  vpc_security_group_ids = var.security_group_ids
  user_data              = var.user_data_base64 != "" ? var.user_data_base64 : null
  update_default_version = true

  dynamic "iam_instance_profile" {
    for_each = var.instance_profile_arn != "" ? [var.instance_profile_arn] : []
    content {
      arn = iam_instance_profile.value
    }
  }

  dynamic "instance_market_options" {
    for_each = var.tier == "spot" ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        instance_interruption_behavior = "terminate"
      }
    }
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = var.root_volume_gib
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  # IMDSv2 only, one hop: pods cannot reach the node's credentials. The spot notice handler
  # (aws-node-termination-handler) runs on the host network, so it still reads the notices.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "volume"
    tags          = local.tags
  }

  tags = local.tags
}

resource "aws_autoscaling_group" "pool" {
  name                = local.group_name
  min_size            = var.min_nodes
  max_size            = var.max_nodes
  desired_capacity    = var.min_nodes
  vpc_zone_identifier = var.subnet_ids
  # Scale-in protection is set per instance by the agent (nodes hosting replicas) before a shrink.
  protect_from_scale_in = false

  launch_template {
    id      = aws_launch_template.pool.id
    version = aws_launch_template.pool.latest_version
  }

  # The agent owns the desired capacity (and may widen min/max); Terraform must not reset them.
  lifecycle {
    ignore_changes = [desired_capacity, min_size, max_size]
  }

  dynamic "tag" {
    for_each = local.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
}
