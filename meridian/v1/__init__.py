"""Generated gRPC stubs for the ``meridian.v1`` contract (see proto/meridian/v1/).

Regenerate with ``make stubs``; tests/unit/meridian/test_stubs.py fails when these drift from the
.proto sources."""
