"""Metadata-service notices (parsers and pollers against a local metadata fake) and the outbox."""

from __future__ import annotations

import asyncio
import time

import pytest

from meridian.fleet import models

from agents import outbox
from agents.providers import notices
from agents.testing import metadata_fake


def test_parse_aws_instance_action():
    """IMDS spot/instance-action becomes (deadline, action)."""
    deadline, action = notices.parse_instance_action('{"action": "terminate", "time": "2026-11-30T08:22:00Z"}')
    assert action == "terminate" and deadline == 1796026920.0


def test_parse_azure_scheduled_events_keeps_preempts_only():
    """Only Preempt events become notices, one per VM named."""
    body = ('{"DocumentIncarnation": 2, "Events": ['
            '{"EventId": "e1", "EventType": "Preempt", "Resources": ["vmss_1", "vmss_2"], '
            '"NotBefore": "Mon, 30 Nov 2026 08:22:00 GMT"},'
            '{"EventId": "e2", "EventType": "Reboot", "Resources": ["vmss_3"], "NotBefore": ""}]}')
    got = notices.parse_scheduled_events(body)
    assert [(n.node, n.deadline) for n in got] == [("vmss_1", 1796026920.0), ("vmss_2", 1796026920.0)]


@pytest.mark.parametrize("flavour", ["aws", "gcp", "azure"])
async def test_watchers_read_each_cloud_dialect(flavour):
    """Each watcher reports nothing, then the notice its cloud's metadata service publishes."""
    fake = metadata_fake.MetadataFake(instance="vmss_4" if flavour == "azure" else "node-1")
    url = await fake.start()
    watcher = notices.MetadataWatcher(flavour, url)
    try:
        assert await watcher.poll() == []
        deadline = round(time.time()) + 120
        if flavour == "aws":
            fake.notify_spot(deadline)
        elif flavour == "gcp":
            fake.preempted = True
        else:
            fake.preempt_azure("vmss_4", deadline)
        got = await watcher.poll()
        assert len(got) == 1 and got[0].node == fake.instance
        if flavour != "gcp":
            assert got[0].deadline == deadline
        assert (await watcher.poll())[0].notice_id == got[0].notice_id  # stable across polls
        assert await asyncio.to_thread(notices.probe, flavour, url)  # a blocking call: off the loop serving the fake
    finally:
        await watcher.close()
        await fake.stop()


def _report(rid: str, state=models.ReplicaState.READY, running: int = 0) -> models.ReplicaReport:
    return models.ReplicaReport(rid, "chat", "rev", f"http://h/{rid}", state, models.ReplicaLoad(running_requests=running))


def test_outbox_sends_state_changes_at_once_and_load_on_refresh():
    """A state change marks reports due; a load-only change waits for the periodic refresh."""
    box = outbox.Outbox()
    assert box.set_replicas([_report("a")]) and box.take().replicas is not None
    assert not box.set_replicas([_report("a", running=5)])
    assert box.take().replicas is None
    box.set_replicas([_report("a", running=6)], refresh=True)
    assert box.take().replicas[0].load.running_requests == 6
    box.set_replicas([_report("a", state=models.ReplicaState.DRAINING)])
    assert box.take().replicas[0].state == models.ReplicaState.DRAINING


def test_outbox_inventory_only_when_changed_and_requeue():
    """Inventory is due when it changes; an unsent batch is put back, acks first."""
    box = outbox.Outbox()
    pool = models.GpuPool("p", "L4", 24, 1, "g6.xlarge", 1, 0, 4, 1, models.Tier.ON_DEMAND, 0.8, 3)
    assert box.set_inventory([pool]) and not box.set_inventory([pool])
    box.put_ack(models.DirectiveAck("d1", models.DirectiveOutcome.ACCEPTED))
    batch = box.take()
    assert batch.inventory == (pool,) and len(batch.acks) == 1
    assert not box.take()
    box.requeue(batch)
    again = box.take()
    assert again.acks == batch.acks and again.inventory == (pool,)


def test_outbox_is_bounded():
    """Past max_pending the oldest acks/events are dropped and counted."""
    box = outbox.Outbox(max_pending=2)
    for i in range(3):
        box.put_event(models.Event(models.EventKind.THROTTLED, message=str(i)))
    assert [e.message for e in box.take().events] == ["1", "2"] and box.dropped == 1
