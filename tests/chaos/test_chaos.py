"""Each fault of faults.FAULTS injected into a whole Meridian on loopback under steady load through
the router (non-streaming and streaming): no request fails where another healthy replica exists,
streams break only on a replica that died or hung, nothing is answered twice, nothing applied is
lost, no directive is carried out twice, and the fleet is whole again within the documented time."""

from __future__ import annotations

import pytest

from tests.chaos import faults, outcome, report

pytestmark = [pytest.mark.chaos, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]


@pytest.mark.parametrize("fault", faults.FAULTS, ids=[f.name for f in faults.FAULTS])
async def test_fault_costs_no_request(world, fault):
    """The fault's outcome keeps every promise of its Expect (see docs/reliability.md)."""
    result = await outcome.run(world, fault)
    report.OUTCOMES.append(result)
    assert result.passed, f"{fault.name}: {result.violations()}; e.g. {result.samples}"
