# Volumes: the agent keeps its state (directive ids carried out, the highest fencing token, replica
# records) on a PersistentVolumeClaim, and EKS provisions EBS volumes only through the EBS CSI
# driver (the in-tree provisioner is migrated to it since Kubernetes 1.23), which EKS does not
# install. So: the driver as an EKS add-on with its own IRSA role (AWS's managed policy for the
# driver), and a default StorageClass on it (gp3, encrypted, bound where the pod lands).

resource "aws_iam_role" "ebs_csi" {
  name               = "${local.name}-ebs-csi"
  assume_role_policy = data.aws_iam_policy_document.irsa_assume["ebs_csi"].json # iam.tf
  tags               = local.tags
}

resource "aws_iam_role_policy_attachment" "ebs_csi" {
  role       = aws_iam_role.ebs_csi.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
}

resource "aws_eks_addon" "ebs_csi" {
  cluster_name             = aws_eks_cluster.this.name
  addon_name               = "aws-ebs-csi-driver"
  service_account_role_arn = aws_iam_role.ebs_csi.arn
  depends_on               = [aws_eks_node_group.system, aws_iam_role_policy_attachment.ebs_csi]
}

resource "kubernetes_storage_class_v1" "gp3" {
  metadata {
    name        = "gp3"
    annotations = { "storageclass.kubernetes.io/is-default-class" = "true" }
  }
  storage_provisioner    = "ebs.csi.aws.com"
  volume_binding_mode    = "WaitForFirstConsumer"
  reclaim_policy         = "Delete"
  allow_volume_expansion = true
  parameters             = { type = "gp3", encrypted = "true" }
  depends_on             = [aws_eks_addon.ebs_csi]
}
