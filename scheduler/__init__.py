"""The Meridian scheduler: autoscaler, global placement solver, reconciler, state, admin API."""
