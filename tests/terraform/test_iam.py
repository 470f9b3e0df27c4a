"""The agent's cloud identity grants exactly what the provider code calls: every API call found in
agents/providers/{aws,gcp,aks}.py (read from the code itself, by an AST walk) maps to an IAM
action or permission that the cloud's GPU cluster module grants, and every grant maps back to a
call. A new call without its grant fails here, and so does a grant nothing uses.

- AWS: boto3 client methods (``self._asg.set_desired_capacity``, paginators named by string) ->
  the operation name in botocore's service model -> ``<signing name>:<OperationName>``.
- GCP: ClusterManager RPCs (``self._call(op, "list_node_pools", ...)``) and Compute REST calls
  (``self._compute.call(method, url, "get_instance_group_manager")``) -> permissions, by the table
  below (from the GKE and Compute Engine REST references' "Authorization requires" lines).
- AKS: the aks provider's ``self._aks.<operations group>.<method>`` (ContainerServiceClient) and
  the Compute reads it shares with the azure provider (``azure.ComputeReads``:
  ``self._client.<group>.<method>``) -> ``Microsoft.ContainerService/...`` and
  ``Microsoft.Compute/...`` actions, by the tables below (from Azure's resource provider operations
  list; long-running operations are polled, hence ``locations/operations/read``, and a POST's final
  result is read from its Location, hence ``locations/operationresults/read``). The azure provider
  (plain, non-AKS scale sets) has no module here; its table is checked against its calls all the
  same, and docs/operations.md lists it."""

from __future__ import annotations

import ast
import json
import pathlib

import boto3
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.containerservice import ContainerServiceClient
from google.cloud import container_v1

from tests.terraform import hcl

PROVIDERS = hcl.ROOT / "agents" / "providers"

# sts:GetCallerIdentity needs no permission: AWS answers it for every principal (and an explicit
# Deny cannot stop it), so no grant is expected for it.
AWS_NO_PERMISSION = {"sts:GetCallerIdentity"}

GKE_PERMISSIONS = {
    "list_node_pools": "container.clusters.get",
    "get_node_pool": "container.clusters.get",
    "set_node_pool_size": "container.clusters.update",
    "set_node_pool_autoscaling": "container.clusters.update",
    "get_operation": "container.operations.get",
}
COMPUTE_PERMISSIONS = {
    "region_quotas": "compute.regions.get",  # regions.get
    "get_instance_group_manager": "compute.instanceGroupManagers.get",  # instanceGroupManagers.get
    # Zonal and regional instanceGroupManagers.listManagedInstances: "Authorization requires the
    # following IAM permission on the specified resource instanceGroupManager:
    # compute.instanceGroupManagers.get" (cloud.google.com/compute/docs/reference/rest/v1/
    # {instanceGroupManagers,regionInstanceGroupManagers}/listManagedInstances). gcloud's
    # `instance-groups managed list-instances` names compute.instanceGroupManagers.list for the
    # command as a whole; the REST method itself needs .get, which an IAM Condition on the group can scope.
    "list_managed_instances": "compute.instanceGroupManagers.get",
}
AZURE_ACTIONS = {  # azure-mgmt-compute: the azure provider, and ComputeReads (shared with aks)
    "resource_skus.list": {"Microsoft.Compute/skus/read"},
    "usage.list": {"Microsoft.Compute/locations/usages/read"},
    "virtual_machine_scale_sets.get": {"Microsoft.Compute/virtualMachineScaleSets/read"},
    "virtual_machine_scale_sets.begin_update": {"Microsoft.Compute/virtualMachineScaleSets/write",
                                                "Microsoft.Compute/locations/operations/read"},
    "virtual_machine_scale_set_vms.list": {"Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read"},
}
_POOLS = "Microsoft.ContainerService/managedClusters/agentPools"
_AKS_OPERATION = "Microsoft.ContainerService/locations/operations/read"
AKS_ACTIONS = {  # azure-mgmt-containerservice: the aks provider
    "agent_pools.list": {f"{_POOLS}/read"},
    "agent_pools.get": {f"{_POOLS}/read"},
    "agent_pools.begin_create_or_update": {f"{_POOLS}/write", _AKS_OPERATION},
    "agent_pools.begin_delete_machines": {f"{_POOLS}/deleteMachines/action", _AKS_OPERATION,
                                          "Microsoft.ContainerService/locations/operationresults/read"},
    "machines.list": {f"{_POOLS}/machines/read"},
}
NOT_API_CALLS = {"close", "get_paginator"}


def _tree(name: str) -> ast.Module:
    return ast.parse((PROVIDERS / name).read_text())


def _self_attr(node: ast.AST) -> str | None:
    """``self.X`` -> "X"."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


# ------------------------------------------------------------------ AWS


def aws_clients(tree: ast.Module) -> dict[str, str]:
    """self attribute -> boto3 service name, from ``create()`` (``x = x or session.client("svc", ...)``)
    and ``__init__`` (``self._attr = x``)."""
    service_of_param: dict[str, str] = {}
    attr_of_param: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                for call in ast.walk(value):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "client"
                            and call.args and isinstance(call.args[0], ast.Constant)):
                        service_of_param[target.id] = call.args[0].value
            attr = _self_attr(target)
            if attr and isinstance(value, ast.Name):
                attr_of_param[attr] = value.id
    return {attr: service_of_param[param] for attr, param in attr_of_param.items() if param in service_of_param}


def aws_calls() -> set[str]:
    tree = _tree("aws.py")
    clients = aws_clients(tree)
    assert set(clients.values()) == {"ec2", "autoscaling", "service-quotas", "sts"}, clients
    methods: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _self_attr(node.value) in clients:
            service = clients[_self_attr(node.value)]
            if node.attr not in NOT_API_CALLS:
                methods.add((service, node.attr))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_paginator"
                and _self_attr(node.func.value) in clients and isinstance(node.args[0], ast.Constant)):
            methods.add((clients[_self_attr(node.func.value)], node.args[0].value))
    actions = set()
    for service, method in methods:
        client = boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        mapping = client.meta.method_to_api_mapping
        assert method in mapping, f"agents/providers/aws.py calls {service}.{method}, which boto3 does not have"
        prefix = client.meta.service_model.signing_name
        actions.add(f"{prefix}:{mapping[method]}")
    return actions


def eks_granted() -> set[str]:
    module = hcl.load(hcl.TERRAFORM / "modules" / "eks-gpu-cluster")
    policy = hcl.of_type(module, "data", "aws_iam_policy_document")["agent"]
    return {a for statement in policy["statement"] for a in statement["actions"]}


def test_eks_agent_role_grants_exactly_the_boto3_calls():
    """The EKS module's agent policy holds an action for every boto3 call of the aws provider and no
    other (sts:GetCallerIdentity needs none)."""
    used = aws_calls()
    assert {"autoscaling:SetDesiredCapacity", "ec2:DescribeInstanceTypes", "servicequotas:GetServiceQuota"} <= used
    granted = eks_granted()
    assert sorted(used - AWS_NO_PERMISSION - granted) == [], "called but not granted"
    assert sorted(granted - used) == [], "granted but never called"


def test_eks_write_actions_are_scoped_to_the_clusters_own_groups():
    """Actions that change a group name this cluster's groups (and its tag), never "*"."""
    module = hcl.load(hcl.TERRAFORM / "modules" / "eks-gpu-cluster")
    policy = hcl.of_type(module, "data", "aws_iam_policy_document")["agent"]
    for statement in policy["statement"]:
        writes = [a for a in statement["actions"] if not a.split(":")[1].startswith(("Describe", "Get", "List"))]
        if writes:
            assert statement["resources"] != ["*"], statement
            assert "module.gpu_pool" in json.dumps(statement["resources"]), statement
            assert statement["condition"][0]["variable"] == "autoscaling:ResourceTag/meridian:cluster"


# ------------------------------------------------------------------ GCP


def gcp_calls() -> tuple[set[str], set[str]]:
    """(ClusterManager RPC names, Compute operation names) the gcp provider calls."""
    rpcs: set[str] = set()
    compute: set[str] = set()
    tree = _tree("gcp.py")
    compute_api_self_calls = {n for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name == "ComputeApi"
                              for n in ast.walk(cls) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                              and n.func.attr == "call" and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "_call" and _self_attr(node.func) == "_call" and len(node.args) >= 2:
            method = node.args[1]
            assert isinstance(method, ast.Constant), ast.dump(node)
            rpcs.add(method.value)
        # Compute REST calls: self._compute.call(...) from the provider, self.call(...) inside
        # ComputeApi itself (its paged listManagedInstances).
        if node.func.attr == "call" and (_self_attr(node.func.value) == "_compute" or node in compute_api_self_calls):
            operation = node.args[2]
            assert isinstance(operation, ast.Constant), ast.dump(node)
            compute.add(operation.value)
    return rpcs, compute


def gke_granted() -> set[str]:
    module = hcl.load(hcl.TERRAFORM / "modules" / "gke-gpu-cluster")
    roles = hcl.of_type(module, "resource", "google_project_iam_custom_role")
    return {p for role in roles.values() for p in role["permissions"]}


def test_gke_agent_roles_grant_exactly_the_calls():
    """The GKE module's custom roles hold a permission for every ClusterManager RPC and Compute REST
    call of the gcp provider, and no other."""
    rpcs, compute = gcp_calls()
    assert {"set_node_pool_size", "list_node_pools"} <= rpcs and "list_managed_instances" in compute
    for rpc in rpcs:
        assert hasattr(container_v1.ClusterManagerClient, rpc), f"ClusterManagerClient has no {rpc}"
    unmapped = sorted((rpcs - set(GKE_PERMISSIONS)) | (compute - set(COMPUTE_PERMISSIONS)))
    assert not unmapped, f"calls with no known permission (add them to the table): {unmapped}"
    used = {GKE_PERMISSIONS[r] for r in rpcs} | {COMPUTE_PERMISSIONS[c] for c in compute}
    granted = gke_granted()
    assert sorted(used - granted) == [], "called but not granted"
    assert sorted(granted - used) == [], "granted but never called"


def test_gke_instance_group_read_is_conditioned_on_the_pools():
    """The managed instance group permission is bound with a condition naming the pools' groups."""
    module = hcl.load(hcl.TERRAFORM / "modules" / "gke-gpu-cluster")
    member = hcl.of_type(module, "resource", "google_project_iam_member")["agent_migs"]
    assert "resource.name ==" in member["condition"][0]["expression"]
    assert "local.pool_migs" in member["condition"][0]["expression"]


# ------------------------------------------------------------------ Azure


def sdk_calls(tree: ast.AST, clients: set[str]) -> set[str]:
    """``"<group>.<method>"`` for every ``self.<client>.<operations group>.<method>`` in ``tree``."""
    calls: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and _self_attr(node.value.value) in clients):
            calls.add(f"{node.value.attr}.{node.attr}")
    return calls


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _has_operation(client_class, call: str) -> bool:
    """Whether an SDK client (made offline, never used) has the operation ``"<group>.<method>"``."""
    group, method = call.split(".")
    client = client_class(object(), "00000000-0000-0000-0000-000000000000")
    try:
        return callable(getattr(getattr(client, group, None), method, None))
    finally:
        client.close()


def aks_calls() -> set[str]:
    """The aks provider's ContainerService calls and the Compute reads it shares (ComputeReads)."""
    tree = _tree("aks.py")
    assert "ComputeReads" in ast.unparse(tree)
    assert sdk_calls(tree, {"_compute", "_client"}) == set(), "aks.py reads Compute through azure.ComputeReads only"
    return sdk_calls(tree, {"_aks"}) | sdk_calls(_class(_tree("azure.py"), "ComputeReads"), {"_client"})


def aks_granted() -> set[str]:
    module = hcl.load(hcl.TERRAFORM / "modules" / "aks-gpu-cluster")
    roles = hcl.of_type(module, "resource", "azurerm_role_definition")
    return {a for role in roles.values() for p in role["permissions"] for a in p["actions"]}


def test_aks_agent_roles_grant_exactly_the_calls():
    """The AKS module's role definitions hold an action for every ContainerService and Compute call of
    the aks provider, and no other: no scale set action, since AKS owns its pools' scale sets."""
    calls = aks_calls()
    assert {"agent_pools.begin_create_or_update", "agent_pools.begin_delete_machines", "machines.list",
            "resource_skus.list", "usage.list"} <= calls
    tables = {**AZURE_ACTIONS, **AKS_ACTIONS}
    unmapped = sorted(calls - set(tables))
    assert not unmapped, f"calls with no known action (add them to the table): {unmapped}"
    for call in calls:
        client_class = ContainerServiceClient if call in AKS_ACTIONS else ComputeManagementClient
        assert _has_operation(client_class, call), f"{client_class.__name__} has no operation {call}"
    used = set().union(*(tables[c] for c in calls))
    granted = aks_granted()
    assert sorted(used - granted) == [], "called but not granted"
    assert sorted(granted - used) == [], "granted but never called"
    assert not [a for a in granted if a.startswith("Microsoft.Compute/virtualMachineScaleSets")]


def test_azure_provider_calls_all_have_known_actions():
    """Every azure-mgmt-compute call of the azure provider (plain scale sets) is an operation of the
    SDK and has its actions in the table docs/operations.md lists."""
    calls = sdk_calls(_tree("azure.py"), {"_client"})
    assert {"virtual_machine_scale_sets.begin_update", "resource_skus.list"} <= calls
    assert sorted(calls - set(AZURE_ACTIONS)) == []
    assert [c for c in calls if not _has_operation(ComputeManagementClient, c)] == []


def test_aks_agent_pool_actions_are_assigned_on_the_cluster_only():
    """The agent pool role is assigned on this AKS cluster, not on a resource group or the
    subscription; only the subscription-level reads are assigned on the subscription."""
    module = hcl.load(hcl.TERRAFORM / "modules" / "aks-gpu-cluster")
    assignments = hcl.of_type(module, "resource", "azurerm_role_assignment")
    assert assignments["agent_pools"]["scope"] == "${azurerm_kubernetes_cluster.this.id}"
    assert "for_each" not in assignments["agent_pools"]
    roles = hcl.of_type(module, "resource", "azurerm_role_definition")
    subscription_wide = {a for p in roles["agent_reads"]["permissions"] for a in p["actions"]}
    assert not [a for a in subscription_wide if "managedClusters" in a]


def test_the_walk_finds_a_new_call():
    """A call added to a provider shows up in the walk (so the comparisons above can fail)."""
    tree = ast.parse("class P:\n    def f(self):\n        self._asg.delete_auto_scaling_group(AutoScalingGroupName='x')\n"
                     "def create(session):\n    autoscaling = session.client('autoscaling')\n"
                     "    return P(autoscaling)\n")
    init = ast.parse("class Q:\n    def __init__(self, autoscaling):\n        self._asg = autoscaling\n")
    tree.body.extend(init.body)
    assert aws_clients(tree) == {"_asg": "autoscaling"}
    client = boto3.client("autoscaling", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    assert client.meta.method_to_api_mapping["delete_auto_scaling_group"] == "DeleteAutoScalingGroup"
    assert pathlib.Path(PROVIDERS / "aws.py").exists()
