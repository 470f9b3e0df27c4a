"""``python -m meridian.demo.kubecluster``: one cluster's fake Kubernetes for the demo and the
end-to-end tests, as its own process (so losing a region kills it with its pods, as the rest of
that cluster's processes).

It serves ``agents.testing.kube.FakeCluster`` (API server, scheduler, kubelets, kube-proxy on
loopback; pods are real processes on their own loopback IPs) with a bearer token of its own, writes
the kubeconfig the cluster's agent reads (mode 0600; the token never appears on a command line),
and runs ``NodeSync`` so the sim cloud's nodes of that cluster (the agent's ``sim-cloud.json``)
join and leave the cluster as Nodes (labelled with their pool and instance type, with the catalog's
GPUs per node), with the AWS Node Termination Handler's cordon and taint on a spot notice. SIGTERM
or SIGINT stops it and every container it runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import secrets
import signal
import sys
from collections.abc import Sequence

from meridian import catalog, spec

from agents.testing import kube

log = logging.getLogger("meridian.demo.kubecluster")


def pool_nodes(cluster: spec.Cluster) -> dict[str, kube.PoolNodes]:
    """How each sim pool's nodes look in the cluster: the catalog's GPUs per node, the instance type."""
    s = cluster.spec
    cat = catalog.instances.default()
    out = {}
    for pool in s.pools:
        offer = cat.lookup(s.cloud, pool.instance_type, s.region) if s.cloud != "local" else None
        if offer is None:
            offer = next((o for o in cat.offers if o.instance_type == pool.instance_type), None)
        out[pool.name] = kube.PoolNodes(gpus=offer.gpu_count if offer else 0,
                                        labels={"node.kubernetes.io/instance-type": pool.instance_type})
    return out


async def serve(cluster: spec.Cluster, *, workdir: pathlib.Path, port: int, kubeconfig: pathlib.Path,
                state_file: pathlib.Path, namespace: str, stop: asyncio.Event) -> None:
    fake = kube.FakeCluster(workdir=workdir, token=secrets.token_urlsafe(24), restart_backoff_scale=0.2)
    await fake.start(port)
    sync = kube.NodeSync(fake, state_file, pools=pool_nodes(cluster), interval_s=0.5)
    try:
        fake.kubeconfig(kubeconfig, namespace=namespace)
        await sync.start()
        log.info("event=kube_cluster_ready cluster=%s url=%s kubeconfig=%s", cluster.metadata.name, fake.url,
                 kubeconfig)
        await stop.wait()
    finally:
        await sync.stop()
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meridian.demo.kubecluster",
                                     description="A fake Kubernetes cluster for one demo cluster, its nodes "
                                                 "mirrored from the sim cloud.")
    parser.add_argument("--cluster-file", required=True, type=pathlib.Path, help="file holding the Cluster document")
    parser.add_argument("--name", required=True, help="which Cluster")
    parser.add_argument("--port", type=int, required=True, help="the API server's loopback port")
    parser.add_argument("--workdir", required=True, type=pathlib.Path, help="pods' working directories and logs")
    parser.add_argument("--kubeconfig", required=True, type=pathlib.Path, help="where to write the kubeconfig")
    parser.add_argument("--state-file", required=True, type=pathlib.Path, help="the sim cloud's state file")
    parser.add_argument("--namespace", default="meridian")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    try:
        loaded = spec.load_files([str(args.cluster_file)])
    except spec.SpecError as exc:
        for issue in exc.issues:
            print(str(issue), file=sys.stderr)
        return 1
    clusters = {c.metadata.name: c for c in loaded.of_kind("Cluster") if isinstance(c, spec.Cluster)}
    if args.name not in clusters:
        print(f"kubecluster: {spec.base.unknown_name('cluster', args.name, sorted(clusters))}", file=sys.stderr)
        return 1

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(clusters[args.name], workdir=args.workdir, port=args.port, kubeconfig=args.kubeconfig,
                    state_file=args.state_file, namespace=args.namespace, stop=stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
