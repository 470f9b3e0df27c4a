"""The agent as its own process (``meridian agent --cluster FILE --name NAME``) against the test
scheduler: static stability when the scheduler dies and comes back, and re-adoption of running
replicas when the agent itself is killed and restarted. A poller hits the replica throughout: it
must never fail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from meridian.fleet import models

from agents.testing import scheduler as test_scheduler
from tests.conftest import free_port

import agent_it_helpers as h

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
POOLS = """  cloud: gcp
  region: us-central1
  zone: us-central1-a
  provider: sim
  pools:
    - {name: l4, instance_type: g2-standard-48, max_nodes: 2, initial_nodes: 1}
  sim: {provisioning_delay_s: 1, spot_preemptions_per_node_hour: 0}"""
R = models.ReplicaState


class AgentProcess:
    """``python -m meridian.cli.main agent`` in its own process group; stopped in a finally."""

    def __init__(self, cluster_file, name: str, log_path):
        self.args = [sys.executable, "-m", "meridian.cli.main", "agent", "--cluster", str(cluster_file),
                     "--name", name, "--on-exit", "stop"]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "MERIDIAN_TEST_TOKEN": h.TOKEN, "PYTHONPATH": REPO}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self) -> None:
        """SIGKILL: the agent gets no chance to clean up (a crash)."""
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]


@pytest.fixture
def setup(tmp_path):
    """A Cluster file pointing at a scheduler port chosen now (so it can be restarted on it)."""
    port = free_port()
    path = tmp_path / "clusters.yaml"
    path.write_text(h.cluster_text("it-p", POOLS, address=f"127.0.0.1:{port}", state_dir=str(tmp_path / "state"),
                                   ports="32500-32599"))
    agent = AgentProcess(path, "it-p", tmp_path / "agent.log")
    pids: set[int] = set()
    try:
        yield port, agent, tmp_path / "state", pids
    finally:
        code = agent.stop()
        h.kill_engines(pids | set(h.engine_pids(tmp_path / "state").values()))
        assert code in (0, None, -9), agent.log()


async def _ready_replica(sched, agent, state_dir, pids) -> models.ReplicaReport:
    rec = sched.record("it-p")
    await h.wait_for(lambda: rec.inventory, timeout_s=60, what="inventory")
    await sched.send("it-p", h.start("d1", "r1", "l4", gpus=2))
    report = await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.READY and r, timeout_s=90,
                              what="r1 ready")
    pids.update(h.engine_pids(state_dir).values())
    return report


async def test_scheduler_restart_keeps_replicas_serving(setup):
    """Scheduler killed: the replica keeps serving and stays supervised; scheduler back on the same
    port: the agent reconnects (hello lists the completed directive), re-reports everything, and
    treats the directive resent by the new scheduler as a duplicate."""
    port, agent, state_dir, pids = setup
    sched = test_scheduler.TestScheduler({"it-p": h.TOKEN}, port=port)
    await sched.start()
    agent.start()
    try:
        report = await _ready_replica(sched, agent, state_dir, pids)
        async with h.Poller(report.endpoint + "/v1/models") as poller:
            await h.wait_for(lambda: poller.ok >= 3, what="poller warm")
            await sched.stop()
            down_at = poller.ok
            await h.wait_for(lambda: poller.ok >= down_at + 10, what="serving while the scheduler is down")
            sched = test_scheduler.TestScheduler({"it-p": h.TOKEN}, port=port, scheduler_id="test-scheduler-2",
                                                 fencing_token=2)
            await sched.start()
            rec = sched.record("it-p")
            await h.wait_for(lambda: rec.hellos and rec.inventory and rec.replica("r1"), timeout_s=60,
                             what="reconnected and re-reported")
            assert "d1" in rec.hellos[0][1]
            assert rec.replica("r1").state == R.READY and rec.replica("r1").endpoint == report.endpoint
            await sched.send("it-p", h.start("d1", "r1", "l4", gpus=2))
            await h.wait_for(lambda: rec.acks_for("d1"), what="ack of the resent directive")
            assert rec.acks_for("d1")[0].outcome == models.DirectiveOutcome.DUPLICATE
        assert poller.failures == [] and poller.ok > 10
        assert h.engine_pids(state_dir) == {"r1": next(iter(pids))}
    finally:
        await sched.stop()


async def test_agent_restart_readopts_running_replicas(setup):
    """Agent SIGKILLed: the engine keeps serving; the restarted agent re-adopts it (same pid, one
    engine on the port, no duplicate replica), reports it READY, and can still drain it."""
    port, agent, state_dir, pids = setup
    sched = test_scheduler.TestScheduler({"it-p": h.TOKEN}, port=port)
    await sched.start()
    agent.start()
    try:
        report = await _ready_replica(sched, agent, state_dir, pids)
        (pid,) = pids
        engine_port = int(report.endpoint.rsplit(":", 1)[1])
        async with h.Poller(report.endpoint + "/v1/models") as poller:
            await h.wait_for(lambda: poller.ok >= 3, what="poller warm")
            agent.kill()
            assert h.alive(pid)
            killed_at = poller.ok
            await h.wait_for(lambda: poller.ok >= killed_at + 5, what="serving without an agent")
            connects = sched.connects["it-p"]
            rec = sched.record("it-p")
            reports_before = len(rec.reports)
            agent.start()
            await h.wait_for(lambda: sched.connects["it-p"] > connects, timeout_s=60, what="agent back")
            rec = sched.record("it-p")
            await h.wait_for(lambda: len(rec.reports) > reports_before, timeout_s=60, what="first report after restart")
            # Re-adopted replicas are probed before the agent connects: its first report says READY.
            first = rec.reports[reports_before]
            assert [(r.replica_id, r.state) for r in first] == [("r1", R.READY)]
            # The node its GPUs are on (the scheduler sizes pools by busy nodes) survives the restart.
            assert report.node_id and first[0].node_id == report.node_id
        assert poller.failures == [], poller.failures
        assert h.engine_pids(state_dir) == {"r1": pid} and h.alive(pid)
        assert h.processes_listening_on(engine_port) == [pid]
        assert [r.replica_id for r in rec.replicas] == ["r1"]
        await sched.send("it-p", h.start("d1-again", "r1", "l4", gpus=2))
        await h.wait_for(lambda: rec.acks_for("d1-again"), what="idempotent start")
        assert rec.acks_for("d1-again")[0].outcome == models.DirectiveOutcome.SUCCEEDED
        assert h.processes_listening_on(engine_port) == [pid]
        await sched.send("it-p", h.drain("d2", "r1", deadline_s=5))
        await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.STOPPED, timeout_s=30, what="drained")
        await h.wait_for(lambda: not h.alive(pid), timeout_s=15, what="engine gone")
    finally:
        await sched.stop()
