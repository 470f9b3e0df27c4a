"""Benchmarks: ``python -m bench.<name>`` prints figures and the machine they were measured on."""
