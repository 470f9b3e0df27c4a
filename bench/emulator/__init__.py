"""``python -m bench.emulator``: how many requests/s one emulator process sustains on this machine."""
