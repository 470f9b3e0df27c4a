"""Runtime adapter: launch and supervise one engine replica (SGLang, or the emulator that speaks
SGLang's HTTP surface), scrape its load, drain it, keep weights warm.

The agent uses this package as a library; it knows nothing of agents, scheduler or router.

    plan = build_command(spec, host="127.0.0.1", port=30001, gpu_ids=[0])
    replica = Replica(spec, "r-1", port=30001, gpu_ids=[0])
    await replica.start(); await replica.wait_ready(600)
    replica.load(); replica.report("chat", "rev", "pool-a", 1)
    await replica.drain(deadline_s=120)

With ``tls=TlsFiles(cert, key), tls_port=N`` the engine binds loopback and a relay process serves
HTTPS on N (``relay_process``).
"""

from runtime_adapter import clock, launcher, process, records, relay_process, scraper, weights
from runtime_adapter.clock import Clock, SystemClock, VirtualClock
from runtime_adapter.config import SupervisorConfig
from runtime_adapter.launcher import EMULATOR_COMMAND, SGLANG_COMMAND, LaunchError, LaunchPlan, build_command
from runtime_adapter.metrics import AdapterMetrics
from runtime_adapter.records import RelayRecord, ReplicaRecord
from runtime_adapter.relay_process import TlsFiles
from runtime_adapter.outcomes import AdoptError, DrainResult, ReplicaFailed, StartupPhases
from runtime_adapter.supervisor import Replica
from runtime_adapter.weights import PrefetchError, Prefetched, Prefetcher, WeightsCache

__all__ = [
    "EMULATOR_COMMAND", "SGLANG_COMMAND", "AdapterMetrics", "AdoptError", "Clock", "DrainResult", "LaunchError",
    "LaunchPlan", "PrefetchError", "Prefetched", "Prefetcher", "RelayRecord", "Replica", "ReplicaFailed",
    "ReplicaRecord", "StartupPhases", "SupervisorConfig", "SystemClock", "TlsFiles", "VirtualClock", "WeightsCache",
    "build_command", "clock", "launcher", "process", "records", "relay_process", "scraper", "weights",
]
