"""One pod on one node, as the kubelet's pod worker runs it: the sandbox (a loopback pod IP), init
containers in order, then every container as a supervised process with its probes, restarts by
``restartPolicy`` with CrashLoopBackOff, and the termination sequence (preStop within the grace
period, SIGTERM to the process group, SIGKILL when the grace period ends, a one-off 2 s extension
when preStop overran). Every change is published as the pod's status through the registry."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
import signal
import uuid
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from meridian import waits

from agents.testing.kube import containers, ipam, objects, podstatus, probes, registry

log = logging.getLogger("agents.testing.kube.kubelet")

BACKOFF_INITIAL_S = 10.0
BACKOFF_MAX_S = 300.0
PRESTOP_EXTENSION_S = 2.0


@dataclasses.dataclass
class Runtime:
    """What every kubelet shares: the API write path, the pod address pool, where containers live,
    the images it can run, one HTTP session for probes and hooks, the restart backoff scale."""
    registry: registry.Registry
    pod_ips: ipam.IpPool
    workdir: pathlib.Path
    command_map: Mapping[str, Sequence[str]]
    session: aiohttp.ClientSession
    restart_backoff_scale: float
    clock: Callable[[], float]
    base_env: Mapping[str, str]


class ContainerRunner:
    """One container of a pod across its restarts."""

    def __init__(self, worker: PodWorker, spec: dict, *, init: bool):
        self.worker = worker
        self.spec = spec
        self.init = init
        self.record = podstatus.ContainerRecord(name=spec["name"], image=spec.get("image", ""),
                                                reason="PodInitializing" if not init and worker.has_init else
                                                "ContainerCreating")
        self.proc: asyncio.subprocess.Process | None = None
        self.exited = asyncio.Event()
        self.env: dict[str, str] = {}
        self._backoff_s = 0.0
        self._probes: list[asyncio.Task] = []
        self._kill_reason = ""

    @property
    def name(self) -> str:
        return self.spec["name"]

    def log_path(self, restart: int | None = None) -> pathlib.Path:
        n = self.record.restart_count if restart is None else restart
        return self.worker.dir / f"{self.name}-{n}.log"

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    # ------------------------------------------------------------------ the container's life

    async def run(self) -> None:
        """Start, supervise and restart until the container stops for good or the pod terminates."""
        w = self.worker
        pull_backoff = BACKOFF_INITIAL_S * w.rt.restart_backoff_scale
        while not w.terminating:
            try:
                self.env = containers.environment(self.spec, w.view(), w.rt.base_env)
                cmd = containers.argv(self.spec, w.rt.command_map, self.env)
            except containers.ImageError as exc:
                self._wait_state("ErrImagePull", str(exc))
                w.event("Failed", f"Failed to pull image \"{self.record.image}\": {exc}", warning=True)
                await w.sleep(pull_backoff)
                self._wait_state("ImagePullBackOff", f"Back-off pulling image \"{self.record.image}\"")
                w.event("BackOff", f"Back-off pulling image \"{self.record.image}\"", warning=True)
                await w.sleep(pull_backoff)
                pull_backoff = min(pull_backoff * 2, BACKOFF_MAX_S * w.rt.restart_backoff_scale)
                continue
            except containers.ConfigError as exc:
                self._wait_state("CreateContainerConfigError", str(exc))
                w.event("Failed", f"Error: {exc}", warning=True)
                await w.sleep(pull_backoff)
                continue
            started = w.rt.clock()
            self.exited = asyncio.Event()
            try:
                self.proc = await containers.start(cmd, env=self.env, cwd=w.dir, log_path=self.log_path())
            except OSError as exc:
                self.proc = None
                self._finish(128, None, started, "StartError",
                             f'failed to create containerd task: exec: "{cmd[0] if cmd else ""}": {exc.strerror}')
                w.event("Failed", f"Error: {self.record.message}", warning=True)
            else:
                await self._supervise(started)
            self.exited.set()
            if w.terminating or not self._should_restart():
                w.publish()
                return
            await self._back_off(started)

    async def _supervise(self, started: float) -> None:
        w, rec = self.worker, self.record
        proc = self.proc
        assert proc is not None
        rec.state, rec.reason, rec.message = "running", "", ""
        rec.started_at, rec.container_id = started, f"fake://{uuid.uuid4().hex}"
        rec.started = not self.spec.get("startupProbe") and not self.init
        rec.ready = rec.started and not self.spec.get("readinessProbe") and not self.init
        self._kill_reason = ""
        w.event("Pulled", f"Container image \"{rec.image}\" already present on machine")
        w.event("Created", f"Created container: {self.name}")
        w.event("Started", f"Started container {self.name}")
        log.info("event=container_started pod=%s/%s container=%s pid=%d restarts=%d", w.namespace, w.name,
                 self.name, proc.pid, rec.restart_count)
        w.publish()
        if not self.init:
            self._start_probes()
        post_start = (self.spec.get("lifecycle") or {}).get("postStart")
        if post_start is not None:
            ok, message = await self._hook(post_start, 30.0)
            if not ok:
                w.event("FailedPostStartHook", f"PostStartHook failed: {message}", warning=True)
                self.request_kill("FailedPostStartHook")
        returncode = await proc.wait()
        containers.signal_group(proc.pid, signal.SIGKILL)  # the rest of the container's processes go with it
        for task in self._probes:
            task.cancel()
        self._probes = []
        code, sig = containers.exit_details(returncode)
        self._finish(code, sig, started, "Completed" if code == 0 else "Error", "")
        log.info("event=container_exited pod=%s/%s container=%s exit_code=%d signal=%s", w.namespace, w.name,
                 self.name, code, containers.signal_name(sig) if sig else "-")

    def _finish(self, code: int, sig: int | None, started: float, reason: str, message: str) -> None:
        rec = self.record
        rec.state, rec.exit_code, rec.signal = "terminated", code, sig
        rec.reason, rec.message = reason, message
        rec.started_at, rec.finished_at = started, self.worker.rt.clock()
        rec.ready = self.init and code == 0
        if not rec.container_id:
            rec.container_id = f"fake://{uuid.uuid4().hex}"

    def _should_restart(self) -> bool:
        policy = self.worker.restart_policy
        code = self.record.exit_code or 0
        if self.init:
            return code != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    async def _back_off(self, started: float) -> None:
        """The kubelet's crash backoff: the first restart at once, then 10 s doubling to 300 s (scaled);
        reset after the container ran 2 x 300 s."""
        w, rec = self.worker, self.record
        scale = w.rt.restart_backoff_scale
        if (rec.finished_at or 0) - started >= 2 * BACKOFF_MAX_S * scale:
            self._backoff_s = 0.0
        delay = self._backoff_s
        self._backoff_s = BACKOFF_INITIAL_S * scale if delay == 0 else min(delay * 2, BACKOFF_MAX_S * scale)
        rec.last = rec.terminated()
        if delay > 0:
            shown = f"{delay:.0f}s" if delay >= 1 else f"{delay * 1000:.0f}ms"
            self._wait_state("CrashLoopBackOff", f"back-off {shown} restarting failed container={self.name} "
                             f"pod={w.name}_{w.namespace}({w.uid})", keep_ids=True)
            w.event("BackOff", f"Back-off restarting failed container {self.name} in pod {w.name}_{w.namespace}"
                    f"({w.uid})", warning=True)
            await w.sleep(delay)
        else:
            w.publish()
        if not w.terminating:
            rec.restart_count += 1

    def _wait_state(self, reason: str, message: str, *, keep_ids: bool = False) -> None:
        rec = self.record
        rec.state, rec.reason, rec.message = "waiting", reason, message
        rec.ready = False
        if not keep_ids:
            rec.started = False
        self.worker.publish()

    # ------------------------------------------------------------------ probes

    def _start_probes(self) -> None:
        startup = self.spec.get("startupProbe")
        if startup:
            self._spawn_probe("Startup", startup, initial=False)
        else:
            self._start_steady_probes()

    def _start_steady_probes(self) -> None:
        for kind, key, initial in (("Readiness", "readinessProbe", False), ("Liveness", "livenessProbe", True)):
            if self.spec.get(key):
                self._spawn_probe(kind, self.spec[key], initial=initial)

    def _spawn_probe(self, kind: str, spec: dict, *, initial: bool) -> None:
        prober: probes.Prober

        async def attempt(timeout_s: float) -> tuple[bool, str]:
            return await self._hook(spec, timeout_s)

        def on_result(ok: bool, message: str, changed: bool) -> None:
            w, rec = self.worker, self.record
            if not self.is_running() or w.terminating and kind == "Liveness":
                return
            if not ok:
                w.event("Unhealthy", f"{kind} probe failed: {message}", warning=True)
            if kind == "Readiness" and changed:
                rec.ready = prober.result
                w.publish()
            elif kind == "Liveness" and changed and not prober.result:
                w.event("Killing", f"Container {self.name} failed liveness probe, will be restarted")
                self.request_kill("Liveness")
            elif kind == "Startup":
                if ok and changed:
                    rec.started = True
                    rec.ready = not self.spec.get("readinessProbe")
                    w.publish()
                    self._start_steady_probes()
                    prober.finished = True
                if not ok and prober.failures >= prober.failure_threshold:
                    w.event("Killing", f"Container {self.name} failed startup probe, will be restarted")
                    self.request_kill("Startup")

        prober = probes.Prober(f"{self.worker.namespace}/{self.worker.name}/{self.name}/{kind}", spec, attempt,
                               on_result, initial=initial)
        self._probes.append(asyncio.create_task(prober.loop()))

    async def _hook(self, handler: Mapping, timeout_s: float) -> tuple[bool, str]:
        w = self.worker
        return await probes.run_handler(handler, pod_ip=w.pod_ip or "127.0.0.1", container=self.spec, env=self.env,
                                        cwd=w.dir, session=w.rt.session, timeout_s=timeout_s)

    def request_kill(self, reason: str) -> None:
        """Stop the running process for a restart (a failed probe or hook): preStop, SIGTERM, SIGKILL within
        the pod's grace period, as the kubelet kills a container it will restart."""
        if not self.is_running() or self._kill_reason:
            return
        self._kill_reason = reason
        grace = float((self.worker.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        deadline = asyncio.get_running_loop().time() + grace
        self.worker.track(asyncio.create_task(self.stop(deadline)))

    # ------------------------------------------------------------------ termination

    async def stop(self, deadline: float) -> None:
        """preStop (bounded by the grace period), SIGTERM, SIGKILL at the deadline (+2 s if preStop overran)."""
        proc, exited = self.proc, self.exited
        if proc is None or proc.returncode is not None:
            return
        loop = asyncio.get_running_loop()
        pre_stop = (self.spec.get("lifecycle") or {}).get("preStop")
        overran = False
        if pre_stop is not None and deadline - loop.time() > 0:
            left = deadline - loop.time()
            try:
                ok, message = await asyncio.wait_for(self._hook(pre_stop, left + 1.0), left)
                if not ok:
                    self.worker.event("FailedPreStopHook", f"PreStopHook failed: {message}", warning=True)
            except TimeoutError:
                overran = True
                log.info("event=prestop_overran pod=%s/%s container=%s", self.worker.namespace, self.worker.name,
                         self.name)
        if proc.returncode is None:
            containers.signal_group(proc.pid, signal.SIGTERM)
        end = deadline + (PRESTOP_EXTENSION_S if overran else 0.0)
        await waits.event_set(exited, max(0.0, end - loop.time()))
        if proc.returncode is None:
            containers.signal_group(proc.pid, signal.SIGKILL)
            log.info("event=container_sigkill pod=%s/%s container=%s", self.worker.namespace, self.worker.name,
                     self.name)
        await exited.wait()

    def kill_now(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            containers.signal_group(self.proc.pid, signal.SIGKILL)


class PodWorker:
    """The life of one pod on a node. ``terminate`` ends it (deletion, eviction, node shutdown)."""

    def __init__(self, rt: Runtime, pod: dict, *, node_name: str, host_ip: str):
        self.rt = rt
        self.pod = pod
        md = pod["metadata"]
        self.uid, self.namespace, self.name = md["uid"], md["namespace"], md["name"]
        self.node_name, self.host_ip = node_name, host_ip
        self.dir = rt.workdir / self.uid
        self.dir.mkdir(parents=True, exist_ok=True)
        spec = pod["spec"]
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.has_init = bool(spec.get("initContainers"))
        self.init = [ContainerRunner(self, c, init=True) for c in spec.get("initContainers") or []]
        self.main = [ContainerRunner(self, c, init=False) for c in spec.get("containers") or []]
        self.pod_ip: str | None = None
        self.start_time = rt.clock()
        self.sandbox_ready = False
        self.terminating = False
        self.init_failed = False
        self._terminal: tuple[str, str, str] | None = None  # (phase, reason, message)
        self._term_event = asyncio.Event()
        self.done = asyncio.Event()
        self.task: asyncio.Task | None = None
        self._side_tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ helpers

    def view(self) -> dict:
        """The pod as the container sees it through the downward API (its IPs filled in)."""
        pod = objects.deep(self.pod)
        status = pod.setdefault("status", {})
        if self.pod_ip:
            status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        status["hostIP"], status["hostIPs"] = self.host_ip, [{"ip": self.host_ip}]
        return pod

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.rt.registry.record_event(self.pod, reason, message, type_="Warning" if warning else "Normal",
                                      host=self.node_name)

    def publish(self) -> None:
        terminal, reason, message = self._terminal or (None, "", "")
        pod_ip = self.pod_ip

        def fn(pod: dict) -> None:
            pod["status"] = podstatus.build(
                pod, init=[r.record for r in self.init], main=[r.record for r in self.main], pod_ip=pod_ip,
                host_ip=self.host_ip, start_time=self.start_time, now=self.rt.registry.now(),
                sandbox_ready=self.sandbox_ready, terminal=terminal, reason=reason, message=message,
                init_failed_for_good=self.init_failed)
        self.rt.registry.mutate("pods", self.namespace, self.name, fn)

    async def sleep(self, seconds: float) -> None:
        """Sleep unless the pod starts terminating first."""
        await waits.event_set(self._term_event, seconds)

    def track(self, task: asyncio.Task) -> None:
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def runner(self, container: str | None) -> ContainerRunner:
        runners = self.main + self.init
        if container is None:
            if len(self.main) > 1:
                raise objects.bad_request(f"a container name must be specified for pod {self.name}, choose one "
                                          f"of: [{' '.join(r.name for r in self.main)}]")
            return self.main[0]
        for r in runners:
            if r.name == container:
                return r
        raise objects.bad_request(f"container {container} is not valid for pod {self.name}")

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")

    async def _run(self) -> None:
        self.publish()
        if (self.pod.get("spec") or {}).get("hostNetwork"):
            self.pod_ip = self.host_ip
        else:
            self.pod_ip = self.rt.pod_ips.allocate()
        self.sandbox_ready = True
        log.info("event=sandbox_ready pod=%s/%s node=%s pod_ip=%s", self.namespace, self.name, self.node_name,
                 self.pod_ip)
        self.publish()
        for runner in self.init:
            await runner.run()
            if self.terminating:
                break
            if runner.record.exit_code != 0:
                self.init_failed = True
                break
        if not self.terminating and not self.init_failed:
            for runner in self.main:
                runner.record.reason = "ContainerCreating"
            await asyncio.gather(*(r.run() for r in self.main))
        if not self.terminating:
            # Every container stopped for good (restartPolicy Never/OnFailure): the sandbox goes away.
            self.sandbox_ready = False
            self.publish()
            log.info("event=pod_completed pod=%s/%s phase=%s", self.namespace, self.name,
                     (self.rt.registry.store.peek("pods", self.namespace, self.name) or {}).get("status", {})
                     .get("phase"))

    async def terminate(self, grace_s: float, *, phase: str | None = None, reason: str = "",
                        message: str = "") -> None:
        """Stop every container (preStop, SIGTERM, SIGKILL after ``grace_s``; 0 kills at once) and publish
        the final status: ``phase`` when given, else Succeeded when every container exited 0, else Failed."""
        if self.terminating:
            await self.done.wait()
            return
        self.terminating = True
        self._term_event.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, grace_s)
        running = [r for r in self.main + self.init if r.is_running()]
        for r in running:
            self.event("Killing", f"Stopping container {r.name}")
        if grace_s <= 0:
            for r in running:
                r.kill_now()
        await asyncio.gather(*(r.stop(deadline) for r in running))
        if self.task is not None:
            with contextlib.suppress(Exception):
                await self.task
        for r in self.main + self.init:
            if r.record.state == "waiting" and r.record.last is not None:
                r.record.state, r.record.reason = "terminated", r.record.last.get("reason", "Error")
                r.record.exit_code = r.record.last.get("exitCode", 1)
        if phase is None:
            ok = all(r.record.state == "terminated" and r.record.exit_code == 0 for r in self.main)
            phase = "Succeeded" if ok else "Failed"
        self._terminal = (phase, reason, message)
        self.sandbox_ready = False
        self.publish()
        log.info("event=pod_terminated pod=%s/%s phase=%s reason=%s grace_s=%.1f", self.namespace, self.name, phase,
                 reason or "-", grace_s)
        self.done.set()

    def kill_now(self) -> None:
        """SIGKILL every container at once (the node is gone, or the fake stops); nothing restarts."""
        self.terminating = True
        self._term_event.set()
        for r in self.main + self.init:
            r.kill_now()

    async def wait_stopped(self) -> None:
        """Wait until every process of this pod exited (after ``kill_now``)."""
        if self.task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self.task
        for task in list(self._side_tasks):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        for r in self.main + self.init:
            if r.proc is not None and r.proc.returncode is None:
                await r.proc.wait()
