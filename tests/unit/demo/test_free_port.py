"""free_port() hands out loopback ports the kernel will not give to outgoing connections, so a
server started on one a moment later finds it still free."""

from __future__ import annotations

import socket

from meridian.demo import processes


def test_ports_are_outside_the_ephemeral_range_and_the_replica_blocks():
    """Every port is bindable, outside ip_local_port_range and outside the fleets' replica blocks."""
    low, high = processes._ephemeral_range()
    blocks = range(processes.PORT_BLOCK_FIRST,
                   processes.PORT_BLOCK_FIRST + processes.PORT_BLOCKS * processes.PORT_BLOCK_SIZE)
    for _ in range(50):
        port = processes.free_port()
        assert not low <= port <= high and port not in blocks
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_no_port_twice_before_the_walk_wraps():
    """Ports asked for in a row (before any is bound) are all different: tests that take several
    ports before starting their servers never get one port twice."""
    ports = [processes.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_taken_port_is_skipped():
    """A port something listens on is never handed out."""
    cursor = processes._PortCursor()
    with socket.socket() as held:
        _hold_next_free(held, cursor, 0)
        held.listen()
        assert cursor.take() != held.getsockname()[1]


def test_a_run_of_ports_fits_below_65536_and_skips_a_taken_port():
    """free_port(2) (a router's two workers' metrics ports): the walk at the top of the range gives
    a run that ends at or below 65535, never one whose second port does not exist, and a run with a
    port something listens on is passed over."""
    cursor = processes._PortCursor()
    cursor._next = cursor.size - 1  # the walk's last port, e.g. 65535
    first = cursor.take(2)
    assert first + 1 <= 65535 and first >= cursor.first
    with socket.socket() as held:
        cursor._next = 0
        _hold_next_free(held, cursor, 1)
        held.listen()
        first = cursor.take(2)
        assert held.getsockname()[1] not in (first, first + 1)


def _hold_next_free(held: socket.socket, cursor, offset: int) -> None:
    """Bind ``held`` to the first port free now at or after the cursor's next port + ``offset``
    (another process may hold the very next one), moving the cursor so that its next run starts
    ``offset`` ports before it."""
    for _ in range(cursor.size):
        try:
            held.bind(("127.0.0.1", cursor.first + cursor._next + offset))
            return
        except OSError:
            cursor._next = (cursor._next + 1) % (cursor.size - offset)
    raise RuntimeError("no free port in the cursor's range")
