# The agent's IAM role (IRSA): exactly the API actions agents/providers/aws.py calls, no more
# (tests/terraform/test_iam.py compares the two). Actions that take a resource are scoped to this
# cluster's own Auto Scaling groups and to the quotas read; the Describe* actions of EC2 and Auto
# Scaling only accept "*" as resource (AWS has no resource-level permission for them).

# IRSA trust: who may assume each role, by the ServiceAccount its pods run as (the agent's; the EBS
# CSI driver's, storage.tf), through this cluster's OIDC provider.
locals {
  irsa_accounts = {
    agent   = "system:serviceaccount:${var.namespace}:meridian-agent"
    ebs_csi = "system:serviceaccount:kube-system:ebs-csi-controller-sa"
  }
}

data "aws_iam_policy_document" "irsa_assume" {
  for_each = local.irsa_accounts
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [aws_iam_openid_connect_provider.this.arn]
    }
    condition {
      test     = "StringEquals"
      variable = "${replace(aws_iam_openid_connect_provider.this.url, "https://", "")}:sub"
      values   = [each.value]
    }
    condition {
      test     = "StringEquals"
      variable = "${replace(aws_iam_openid_connect_provider.this.url, "https://", "")}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "agent" {
  name               = "${local.name}-agent"
  assume_role_policy = data.aws_iam_policy_document.irsa_assume["agent"].json
  tags               = local.tags
}

locals {
  # Service Quotas codes the provider reads (QUOTA_CODES in agents/providers/aws.py): running
  # on-demand and spot G/VT and P instances, in vCPUs.
  quota_codes = ["L-DB2E81BA", "L-3819A6DF", "L-417A185B", "L-7212CCBC"]
}

data "aws_iam_policy_document" "agent" {
  statement {
    sid = "ReadPoolsAndOfferings"
    # Describe calls: AWS accepts only "*" as their resource.
    actions = [
      "autoscaling:DescribeAutoScalingGroups",
      "autoscaling:DescribeAutoScalingInstances",
      "autoscaling:DescribeScalingActivities",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeSpotPriceHistory",
    ]
    resources = ["*"]
  }
  statement {
    sid = "ResizeOwnPools"
    actions = [
      "autoscaling:SetDesiredCapacity",
      "autoscaling:UpdateAutoScalingGroup",
      "autoscaling:SetInstanceProtection",
    ]
    resources = [for p in module.gpu_pool : p.asg_arn]
    condition {
      test     = "StringEquals"
      variable = "autoscaling:ResourceTag/meridian:cluster"
      values   = [var.cluster_id]
    }
  }
  statement {
    sid       = "ReadGpuQuotas"
    actions   = ["servicequotas:GetServiceQuota"]
    resources = [for code in local.quota_codes : "arn:${data.aws_partition.current.partition}:servicequotas:${var.region}:${data.aws_caller_identity.current.account_id}:ec2/${code}"]
  }
  # sts:GetCallerIdentity (the spec.aws.account_id check) needs no permission: AWS allows it to
  # every principal.
}

resource "aws_iam_role_policy" "agent" {
  name   = "meridian-agent"
  role   = aws_iam_role.agent.id
  policy = data.aws_iam_policy_document.agent.json
}
