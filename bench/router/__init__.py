"""Router benchmark: Meridian router vs sglang-router vs direct, same backends, same load."""
