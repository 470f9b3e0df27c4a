"""The fake API server driven by the real kubernetes_asyncio client: CRUD of pods, services, nodes and
events with resource versions, selectors, pagination, patches, watch events, 404/409/410/422, and
bearer-token authentication."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from agents.testing import kube


def bare_pod(name: str, labels=None, **spec) -> dict:
    """A pod no scheduler picks up (its schedulerName names none), so only the test's writes change it."""
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "nothing:1"}], "schedulerName": "nobody", **spec}}


async def test_kubeconfig_and_direct_configuration_both_reach_the_server(cluster, core, tmp_path):
    """A client loaded from the written kubeconfig and one built from Configuration(host=url) see the same nodes."""
    cluster.add_node("n1", gpus=2)
    via_kubeconfig = await core.list_node()
    configuration = client.Configuration(host=cluster.url)
    async with client.ApiClient(configuration) as api_client:
        direct = await client.CoreV1Api(api_client).list_node()
        version = await client.VersionApi(api_client).get_code()
    assert [n.metadata.name for n in via_kubeconfig.items] == ["n1"] == [n.metadata.name for n in direct.items]
    node = direct.items[0]
    assert node.status.allocatable["nvidia.com/gpu"] == "2"
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert node.status.addresses[0].type == "InternalIP" and node.status.addresses[0].address.startswith("127.76.")
    assert version.major == "1"
    _, active = config.list_kube_config_contexts(str(tmp_path / "kubeconfig"))
    assert active["context"]["namespace"] == "default"


async def test_pod_create_get_list_and_errors(core):
    """Create returns the stored pod with uid/resourceVersion; a duplicate is 409, a missing pod 404, no containers 422."""
    created = await core.create_namespaced_pod("default", bare_pod("p1", {"app": "a"}))
    assert created.metadata.uid and created.metadata.resource_version and created.status.phase == "Pending"
    assert created.spec.restart_policy == "Always" and created.spec.termination_grace_period_seconds == 30
    got = await core.read_namespaced_pod("p1", "default")
    assert got.metadata.resource_version == created.metadata.resource_version
    with pytest.raises(ApiException) as dup:
        await core.create_namespaced_pod("default", bare_pod("p1"))
    assert dup.value.status == 409 and "AlreadyExists" in dup.value.body
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404 and 'pods \\"nope\\" not found' in missing.value.body
    with pytest.raises(ApiException) as invalid:
        await core.create_namespaced_pod("default", {"metadata": {"name": "p2"}, "spec": {"containers": []}})
    assert invalid.value.status == 422 and "spec.containers: Required value" in invalid.value.body
    with pytest.raises(ApiException) as bad_label:
        await core.create_namespaced_pod("default", bare_pod("p3", {"meridian.dev/revision": "v1 beta"}))
    assert bad_label.value.status == 422 and "metadata.labels" in bad_label.value.body
    with pytest.raises(ApiException) as no_ns:
        await core.create_namespaced_pod("elsewhere", bare_pod("p4"))
    assert no_ns.value.status == 404 and 'namespaces \\"elsewhere\\" not found' in no_ns.value.body
    generated = await core.create_namespaced_pod("default", {"metadata": {"generateName": "gen-"},
                                                             "spec": bare_pod("x")["spec"]})
    assert generated.metadata.name.startswith("gen-") and len(generated.metadata.name) == 9
    listed = await core.list_namespaced_pod("default")
    assert sorted(p.metadata.name for p in listed.items) == sorted(["p1", generated.metadata.name])
    assert int(listed.metadata.resource_version) >= int(generated.metadata.resource_version)


async def test_label_and_field_selectors(core):
    """Lists honour =, ==, !=, in, notin, exists and !key label selectors, and field selectors on name and phase."""
    for name, labels in (("a", {"tier": "gpu", "pool": "p1"}), ("b", {"tier": "cpu", "pool": "p2"}),
                         ("c", {"tier": "gpu"})):
        await core.create_namespaced_pod("default", bare_pod(name, labels))

    async def names(**kw):
        return sorted(p.metadata.name for p in (await core.list_namespaced_pod("default", **kw)).items)

    assert await names(label_selector="tier=gpu") == ["a", "c"]
    assert await names(label_selector="tier==gpu,pool=p1") == ["a"]
    assert await names(label_selector="pool!=p1") == ["b", "c"]
    assert await names(label_selector="pool in (p1, p2)") == ["a", "b"]
    assert await names(label_selector="pool notin (p1)") == ["b", "c"]
    assert await names(label_selector="pool") == ["a", "b"]
    assert await names(label_selector="!pool") == ["c"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c"]
    assert sorted(p.metadata.name for p in (await core.list_pod_for_all_namespaces(
        label_selector="tier=gpu")).items) == ["a", "c"]
    with pytest.raises(ApiException) as bad:
        await core.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert bad.value.status == 400 and "field label not supported: spec.bogus" in bad.value.body
    with pytest.raises(ApiException) as bad_label:
        await core.list_namespaced_pod("default", label_selector="tier in gpu")
    assert bad_label.value.status == 400


async def test_pagination_and_expired_continue(cluster, core):
    """limit/continue pages a list consistently; a continue token from before a compaction is 410 Gone."""
    for n in range(5):
        await core.create_namespaced_pod("default", bare_pod(f"p{n}"))
    page1 = await core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in page1.items] == ["p0", "p1"] and page1.metadata._continue
    await core.delete_namespaced_pod("p3", "default")  # unbound: removed at once
    page2 = await core.list_namespaced_pod("default", limit=2, _continue=page1.metadata._continue)
    assert [p.metadata.name for p in page2.items] == ["p2", "p3"]  # the snapshot of the first page
    cluster.compact()
    with pytest.raises(ApiException) as expired:
        await core.list_namespaced_pod("default", limit=2, _continue=page2.metadata._continue)
    assert expired.value.status == 410 and "Expired" in expired.value.body


async def test_patch_formats_and_optimistic_concurrency(core):
    """Strategic-merge, JSON and merge patches change labels; a PUT with a stale resourceVersion is 409 Conflict."""
    pod = await core.create_namespaced_pod("default", bare_pod("p", {"a": "1"}))
    patched = await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"b": "2"}}})
    assert patched.metadata.labels == {"a": "1", "b": "2"}
    patched = await core.patch_namespaced_pod("p", "default", [{"op": "remove", "path": "/metadata/labels/a"}])
    assert patched.metadata.labels == {"b": "2"}
    patched = await core.patch_namespaced_pod("p", "default", {"metadata": {"annotations": {"x": "y"}}},
                                              _content_type="application/merge-patch+json")
    assert patched.metadata.annotations == {"x": "y"}
    assert int(patched.metadata.resource_version) > int(pod.metadata.resource_version)
    stale = pod
    stale.metadata.labels = {"c": "3"}
    with pytest.raises(ApiException) as conflict:
        await core.replace_namespaced_pod("p", "default", stale)
    assert conflict.value.status == 409 and "the object has been modified" in conflict.value.body
    with pytest.raises(ApiException) as immutable:
        await core.patch_namespaced_pod("p", "default", {"spec": {"restartPolicy": "Never"}})
    assert immutable.value.status == 422 and "Forbidden: pod updates may not change" in immutable.value.body


async def test_watch_events_in_order_with_selector_transitions(core):
    """A watch sees ADDED, MODIFIED, DELETED with rising resourceVersions; a label change away from the selector is DELETED."""
    listed = await core.list_namespaced_pod("default")
    events: list[tuple[str, str, int]] = []

    async def consume():
        w = watch.Watch()
        async with w:
            async for event in w.stream(core.list_namespaced_pod, "default", label_selector="app=web",
                                        resource_version=listed.metadata.resource_version, timeout_seconds=5):
                events.append((event["type"], event["object"].metadata.name,
                               int(event["object"].metadata.resource_version)))
                if len(events) == 4:
                    w.stop()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    await core.create_namespaced_pod("default", bare_pod("w1", {"app": "web"}))
    await core.create_namespaced_pod("default", bare_pod("other", {"app": "db"}))
    await core.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"v": "2"}}})
    await core.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"app": "gone"}}})
    await core.create_namespaced_pod("default", bare_pod("w2", {"app": "web"}))
    await asyncio.wait_for(task, 10)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1"), ("ADDED", "w2")]
    assert [rv for _, _, rv in events] == sorted(rv for _, _, rv in events)


async def test_watch_from_compacted_version_is_410_then_relist_resumes(cluster, core):
    """After compaction a watch from an old resourceVersion raises 410 Gone; a relist's version watches fine."""
    old = await core.create_namespaced_pod("default", bare_pod("p"))
    for n in range(3):
        await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"n": str(n)}}})
    cluster.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as gone:
        async for _ in w.stream(core.list_namespaced_pod, "default", resource_version=old.metadata.resource_version,
                                timeout_seconds=2):
            pass
    assert gone.value.status == 410 and "too old resource version" in gone.value.reason
    relisted = await core.list_namespaced_pod("default")
    seen = []

    async def consume():
        w2 = watch.Watch()
        async with w2:
            async for event in w2.stream(core.list_namespaced_pod, "default",
                                         resource_version=relisted.metadata.resource_version, timeout_seconds=5):
                seen.append((event["type"], event["object"].metadata.labels.get("n")))
                w2.stop()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"n": "after"}}})
    await asyncio.wait_for(task, 10)
    assert seen == [("MODIFIED", "after")]


async def test_watch_bookmarks_carry_the_current_version(cluster, core):
    """With allowWatchBookmarks an idle watch gets BOOKMARK events whose resourceVersion is the store's."""
    await core.create_namespaced_pod("default", bare_pod("p"))
    listed = await core.list_namespaced_pod("default")
    w = watch.Watch()
    async with w:
        async for event in w.stream(core.list_namespaced_pod, "default", allow_watch_bookmarks=True,
                                    resource_version=listed.metadata.resource_version, timeout_seconds=3):
            assert event["type"] == "BOOKMARK"
            assert event["raw_object"]["metadata"]["resourceVersion"] == str(cluster.store.resource_version)
            w.stop()
            break


async def test_services_allocate_cluster_ip_and_node_ports(core):
    """A NodePort service gets a ClusterIP from the service range and a nodePort in 30000-32767; delete frees them."""
    svc = await core.create_namespaced_service("default", {
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    assert svc.spec.cluster_ip.startswith("127.79.") and svc.spec.cluster_ips == [svc.spec.cluster_ip]
    assert 30000 <= svc.spec.ports[0].node_port <= 32767 and svc.spec.ports[0].protocol == "TCP"
    with pytest.raises(ApiException) as taken:
        await core.create_namespaced_service("default", {
            "metadata": {"name": "web2"},
            "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": svc.spec.ports[0].node_port}]}})
    assert taken.value.status == 422 and "provided port is already allocated" in taken.value.body
    listed = await core.list_namespaced_service("default")
    assert [s.metadata.name for s in listed.items] == ["web"]
    await core.delete_namespaced_service("web", "default")
    again = await core.create_namespaced_service("default", {
        "metadata": {"name": "web3"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": svc.spec.ports[0].node_port}]}})
    assert again.spec.ports[0].node_port == svc.spec.ports[0].node_port


async def test_nodes_patch_taints_and_delete(cluster, core):
    """Node taints and unschedulable are patchable through the API; a cordon adds the controller's taint; delete is a Status."""
    cluster.add_node("n1", labels={"pool": "a"})
    await core.patch_node("n1", {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}})
    node = await core.read_node("n1")
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("k", "v", "NoSchedule")]
    cluster.cordon("n1")
    node = await core.read_node("n1")
    assert node.spec.unschedulable is True
    assert {t.key for t in node.spec.taints} == {"k", "node.kubernetes.io/unschedulable"}
    assert [n.metadata.name for n in (await core.list_node(label_selector="pool=a")).items] == ["n1"]
    status = await core.delete_node("n1")
    assert status.status == "Success"
    with pytest.raises(ApiException) as gone:
        await core.read_node("n1")
    assert gone.value.status == 404


async def test_events_can_be_posted_and_listed(core):
    """A core/v1 Event posted by a client can be listed back by its involved object's name."""
    await core.create_namespaced_event("default", {
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Testing", "message": "hello", "type": "Normal"})
    events = await core.list_namespaced_event("default", field_selector="involvedObject.name=p")
    assert [(e.reason, e.message) for e in events.items] == [("Testing", "hello")]


async def test_bearer_token_required_when_set(tmp_path):
    """With a token, requests without it or with a wrong one are 401 Unauthorized; the right one works."""
    fake = kube.FakeCluster(workdir=tmp_path / "kube", token="s3cret-token")
    await fake.start()
    try:
        path = fake.kubeconfig(tmp_path / "kubeconfig")
        assert "s3cret-token" in path.read_text() and (path.stat().st_mode & 0o777) == 0o600
        api_client = await config.new_client_from_config(config_file=str(path))
        async with api_client:
            assert (await client.CoreV1Api(api_client).list_namespace()).items
        for headers in ({}, {"authorization": "Bearer wrong"}):
            configuration = client.Configuration(host=fake.url, api_key=headers)
            async with client.ApiClient(configuration) as anonymous:
                with pytest.raises(ApiException) as denied:
                    await client.CoreV1Api(anonymous).list_namespaced_pod("default")
            assert denied.value.status == 401 and "Unauthorized" in denied.value.body
    finally:
        await fake.stop()


async def test_unknown_paths_and_methods_are_status_errors(cluster):
    """An unknown resource is a 404 Status, not an HTML page, so clients report it as the real server's error."""
    async with client.ApiClient(client.Configuration(host=cluster.url)) as api_client:
        with pytest.raises(ApiException) as unknown:
            await api_client.call_api("/api/v1/namespaces/default/widgets", "GET", response_types_map={200: "object"})
    assert unknown.value.status == 404 and '"kind": "Status"' in unknown.value.body




async def test_compaction_window_counts_changes_per_resource(tmp_path):
    """The window keeps the last N changes of each resource: Event churn does not expire a pod watch, pod churn does."""
    fake = kube.FakeCluster(workdir=tmp_path / "kube", compaction_window=3)
    await fake.start()
    try:
        async with client.ApiClient(client.Configuration(host=fake.url)) as api_client:
            core = client.CoreV1Api(api_client)
            start = (await core.create_namespaced_pod("default", bare_pod("p"))).metadata.resource_version
            for n in range(5):
                await core.create_namespaced_event("default", {
                    "metadata": {"name": f"e{n}"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"})
            await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"n": "1"}}})
            w = watch.Watch()
            async with w:
                async for event in w.stream(core.list_namespaced_pod, "default", resource_version=start,
                                            timeout_seconds=2):
                    assert (event["type"], event["object"].metadata.labels) == ("MODIFIED", {"n": "1"})
                    w.stop()
            for n in range(2, 6):
                await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"n": str(n)}}})
            with pytest.raises(ApiException) as gone:
                async for _ in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=start,
                                                    timeout_seconds=2):
                    pass
            assert gone.value.status == 410
    finally:
        await fake.stop()


async def test_volumes_are_validated_like_the_real_server(core):
    """A mount of an undeclared volume and a volume without a source are 422; hostPath/PVC/emptyDir volumes are accepted."""
    pod = bare_pod("v")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "cache", "mountPath": "/models"}]
    with pytest.raises(ApiException) as missing:
        await core.create_namespaced_pod("default", pod)
    assert missing.value.status == 422 and 'volumeMounts[0].name: Not found: \\"cache\\"' in missing.value.body
    pod["spec"]["volumes"] = [{"name": "cache"}]
    with pytest.raises(ApiException) as no_source:
        await core.create_namespaced_pod("default", pod)
    assert no_source.value.status == 422 and "must specify a volume type" in no_source.value.body
    for source in ({"hostPath": {"path": "/var/lib/meridian/models", "type": "DirectoryOrCreate"}},
                   {"persistentVolumeClaim": {"claimName": "models"}}, {"emptyDir": {}}):
        pod["metadata"]["name"] = f"v-{next(iter(source)).lower()}"
        pod["spec"]["volumes"] = [{"name": "cache", **source}]
        created = await core.create_namespaced_pod("default", pod)
        assert created.spec.volumes[0].name == "cache"
