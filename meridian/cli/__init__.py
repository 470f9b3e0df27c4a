"""The ``meridian`` command line. Each subcommand lives in its own module here; this package (with
the demo and the simulator) is the only code that wires components together."""
