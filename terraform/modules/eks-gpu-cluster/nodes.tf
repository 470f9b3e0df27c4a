# Nodes. The GPU pools are self-managed node groups: one Auto Scaling group per pool (module
# aws-gpu-pool), because the agent resizes ASGs and protects the nodes that host replicas from
# scale-in (SetInstanceProtection) before a shrink; an EKS managed node group owns its size
# (UpdateNodegroupConfig) and picks the nodes it removes itself, which would break make-before-break.
# The small system group (the agent, CoreDNS, the device plugin) is an EKS managed node group:
# Meridian never resizes it.

data "aws_iam_policy_document" "node_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "node" {
  name               = "${local.name}-node"
  assume_role_policy = data.aws_iam_policy_document.node_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy_attachment" "node" {
  for_each   = toset(["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy"])
  role       = aws_iam_role.node.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/${each.value}"
}

resource "aws_iam_instance_profile" "node" {
  name = "${local.name}-node"
  role = aws_iam_role.node.name
  tags = local.tags
}

# Self-managed nodes join through an access entry of type EC2_LINUX (no aws-auth ConfigMap).
resource "aws_eks_access_entry" "gpu_nodes" {
  cluster_name  = aws_eks_cluster.this.name
  principal_arn = aws_iam_role.node.arn
  type          = "EC2_LINUX"
  tags          = local.tags
}

resource "aws_eks_node_group" "system" {
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "system"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = var.subnet_ids
  instance_types  = [var.system_instance_type]
  capacity_type   = "ON_DEMAND"

  scaling_config {
    desired_size = var.system_nodes
    min_size     = var.system_nodes
    max_size     = var.system_nodes
  }

  labels = { "meridian.dev/role" = "system" }
  tags   = local.tags

  depends_on = [aws_iam_role_policy_attachment.node]
}

# The EKS-optimized Amazon Linux 2023 AMI with the NVIDIA driver and container toolkit.
data "aws_ssm_parameter" "gpu_ami" {
  name = "/aws/service/eks/optimized-ami/${var.kubernetes_version}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
}

data "aws_subnet" "selected" {
  for_each = toset(var.subnet_ids)
  id       = each.value
}

locals {
  pools = { for p in var.pools : p.name => p }
  # A pool with a zone launches only into that zone's subnets (the Cluster spec's zone by default).
  pool_subnets = {
    for name, p in local.pools : name => [
      for s in var.subnet_ids : s
      if(p.zone != "" ? p.zone : var.zone) == "" || data.aws_subnet.selected[s].availability_zone == (p.zone != "" ? p.zone : var.zone)
    ]
  }
  # nodeadm (AL2023) joins the node, labels it with its pool and taints it for GPU pods only.
  node_user_data = {
    for name, p in local.pools : name => base64encode(<<-EOT
      MIME-Version: 1.0
      Content-Type: multipart/mixed; boundary="MERIDIAN"

      --MERIDIAN
      Content-Type: application/node.eks.aws

      ---
      apiVersion: node.eks.aws/v1alpha1
      kind: NodeConfig
      spec:
        cluster:
          name: ${aws_eks_cluster.this.name}
          apiServerEndpoint: ${aws_eks_cluster.this.endpoint}
          certificateAuthority: ${aws_eks_cluster.this.certificate_authority[0].data}
          cidr: ${aws_eks_cluster.this.kubernetes_network_config[0].service_ipv4_cidr}
        kubelet:
          flags:
            - --node-labels=meridian.dev/cluster=${var.cluster_id},meridian.dev/pool=${local.group_names[name]},meridian.dev/tier=${p.tier}
            - --register-with-taints=nvidia.com/gpu=present:NoSchedule

      --MERIDIAN--
      EOT
    )
  }
  group_names = { for name, p in local.pools : name => "${local.name}-${name}" }
}

module "gpu_pool" {
  source   = "../aws-gpu-pool"
  for_each = local.pools

  cluster_id           = var.cluster_id
  pool_name            = each.key
  group_name           = local.group_names[each.key]
  instance_type        = each.value.instance_type
  tier                 = each.value.tier
  ami_id               = data.aws_ssm_parameter.gpu_ami.insecure_value
  subnet_ids           = local.pool_subnets[each.key]
  security_group_ids   = [aws_eks_cluster.this.vpc_config[0].cluster_security_group_id]
  instance_profile_arn = aws_iam_instance_profile.node.arn
  user_data_base64     = local.node_user_data[each.key]
  root_volume_gib      = each.value.root_volume_gib
  min_nodes            = each.value.min_nodes
  max_nodes            = each.value.max_nodes
  tags                 = merge(local.tags, { "kubernetes.io/cluster/${local.name}" = "owned" })

  depends_on = [aws_eks_access_entry.gpu_nodes]
}
