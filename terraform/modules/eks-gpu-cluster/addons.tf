# GPU plumbing on the nodes: the NVIDIA device plugin advertises nvidia.com/gpu (the AL2023 NVIDIA
# AMI brings the driver and container toolkit), and aws-node-termination-handler turns a spot
# interruption notice (IMDS, two minutes ahead) into the cordon and taint the agent's kubernetes
# backend watches as the node's reclaim signal.

resource "helm_release" "nvidia_device_plugin" {
  name       = "nvidia-device-plugin"
  namespace  = "kube-system"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = var.device_plugin_version
  values = [yamlencode({
    nodeSelector = { "meridian.dev/cluster" = var.cluster_id }
    tolerations  = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
  })]
  depends_on = [aws_eks_addon.core]
}

resource "helm_release" "node_termination_handler" {
  name       = "aws-node-termination-handler"
  namespace  = "kube-system"
  repository = "https://aws.github.io/eks-charts"
  chart      = "aws-node-termination-handler"
  version    = var.node_termination_handler_version
  values = [yamlencode({
    enableSpotInterruptionDraining = true
    enableRebalanceMonitoring      = false
    # Cordon and taint only: the agent drains its replicas itself, make-before-break.
    cordonOnly   = true
    taintNode    = true
    nodeSelector = { "meridian.dev/tier" = "spot" }
    tolerations  = [{ operator = "Exists" }]
  })]
  depends_on = [aws_eks_addon.core]
}
