# The scheduler's state store. elasticache: a two-node replication group across availability
# zones (automatic failover), TLS in transit, encryption at rest with a key of its own, an auth
# token generated here and kept in Secrets Manager, reachable only from the cluster's nodes.

locals {
  elasticache = var.redis_mode == "elasticache"
  tags        = merge(var.tags, { "meridian:fleet" = var.name })
}

resource "aws_security_group" "redis" {
  count       = local.elasticache ? 1 : 0
  name        = "${var.name}-redis"
  description = "Redis of the Meridian scheduler: only the EKS nodes"
  vpc_id      = var.vpc_id
  tags        = local.tags

  ingress {
    description     = "Redis (TLS) from the scheduler pods' nodes"
    from_port       = 6379
    to_port         = 6379
    protocol        = "tcp"
    security_groups = [var.cluster_security_group_id]
  }
}

resource "aws_elasticache_subnet_group" "redis" {
  count      = local.elasticache ? 1 : 0
  name       = "${var.name}-redis"
  subnet_ids = var.subnet_ids
  tags       = local.tags
}

resource "aws_kms_key" "redis" {
  count                   = local.elasticache ? 1 : 0
  description             = "${var.name}: scheduler state at rest"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.redis_key.json
  tags                    = local.tags
}

data "aws_caller_identity" "current" {}

data "aws_iam_policy_document" "redis_key" {
  #checkov:skip=CKV_AWS_111:AWS's default key policy: a key policy's resource is always the key itself, and the account root administers it through IAM.
  #checkov:skip=CKV_AWS_356:AWS's default key policy: a key policy's resource is always the key itself, and the account root administers it through IAM.
  #checkov:skip=CKV_AWS_109:AWS's default key policy: a key policy's resource is always the key itself, and the account root administers it through IAM.
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

# The password of the state's Redis: ElastiCache's auth token, or the overlay's own Redis's
# (in_cluster); the Secret meridian-redis-auth (scheduler.tf) hands it to both ends.
resource "random_password" "redis" {
  count   = var.redis_mode == "external" ? 0 : 1
  length  = 64
  special = false
}

resource "aws_secretsmanager_secret" "redis" {
  #checkov:skip=CKV2_AWS_57:The auth token is rotated with an ElastiCache token update (docs/operations.md), not by a Lambda.
  count       = local.elasticache ? 1 : 0
  name        = "${var.name}/scheduler-redis-auth-token"
  description = "Auth token of the Meridian scheduler's ElastiCache replication group"
  kms_key_id  = aws_kms_key.redis[0].arn
  tags        = local.tags
}

resource "aws_secretsmanager_secret_version" "redis" {
  count         = local.elasticache ? 1 : 0
  secret_id     = aws_secretsmanager_secret.redis[0].id
  secret_string = random_password.redis[0].result
}

resource "aws_elasticache_replication_group" "redis" {
  count                      = local.elasticache ? 1 : 0
  replication_group_id       = "${var.name}-state"
  description                = "Meridian scheduler state and leader lease"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.elasticache_node_type
  num_cache_clusters         = 2
  automatic_failover_enabled = true
  multi_az_enabled           = true
  port                       = 6379
  subnet_group_name          = aws_elasticache_subnet_group.redis[0].name
  security_group_ids         = [aws_security_group.redis[0].id]
  at_rest_encryption_enabled = true
  kms_key_id                 = aws_kms_key.redis[0].arn
  transit_encryption_enabled = true
  auth_token                 = random_password.redis[0].result
  snapshot_retention_limit   = 7
  auto_minor_version_upgrade = true
  tags                       = local.tags
}

data "aws_secretsmanager_secret_version" "external_redis" {
  count     = var.redis_mode == "external" ? 1 : 0
  secret_id = var.redis_url_secret_arn
}

locals {
  state_url = {
    # No password in this URL: the scheduler reads it from meridian-redis-auth (MERIDIAN_REDIS_PASSWORD).
    elasticache = local.elasticache ? "rediss://${aws_elasticache_replication_group.redis[0].primary_endpoint_address}:6379/0" : ""
    external    = var.redis_mode == "external" ? data.aws_secretsmanager_secret_version.external_redis[0].secret_string : ""
    in_cluster  = "redis://meridian-redis:6379/0"
  }[var.redis_mode]
}
