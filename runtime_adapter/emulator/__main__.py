"""``python -m runtime_adapter.emulator --model-path M --port P ...`` (SGLang's flags)."""

import sys

from runtime_adapter.emulator import cli

sys.exit(cli.main())
