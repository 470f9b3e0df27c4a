"""Findings in a valid spec set that are not errors but likely mistakes (``meridian validate``
prints them as warnings, exit status unchanged): each a ``SpecIssue`` naming file, line and field.

- A ``resources.throughput_profile`` measured on another workload than the one the deployment
  declares (``resources.throughput_profile_workload`` against ``workload``, either mean more than
  ``STALE_SHARE`` apart): requests/s hold for the tokens they were measured on (a 4x longer prompt
  serves a fraction of the requests), and the scheduler sizes with the figures as given.

Pure: a loaded spec set in, findings out."""

from __future__ import annotations

from meridian.spec import deployment as deployment_spec
from meridian.spec.errors import SpecIssue
from meridian.spec.loader import SpecSet

# Relative difference in mean prompt or output tokens beyond which a measured profile is stale.
STALE_SHARE = 0.10


def advisories(specs: SpecSet) -> list[SpecIssue]:
    """Every advisory of ``specs``, in file order."""
    out: list[SpecIssue] = []
    for loaded in specs.documents:
        if not isinstance(loaded.doc, deployment_spec.ModelDeployment):
            continue
        spec = loaded.doc.spec
        measured = spec.resources.throughput_profile_workload
        if measured is None:
            continue
        declared = spec.workload
        apart = [(what, m, d) for what, m, d in (("prompt", measured.prompt_tokens_mean, declared.prompt_tokens_mean),
                                                 ("output", measured.output_tokens_mean, declared.output_tokens_mean))
                 if _apart(m, d)]
        if not apart:
            continue
        path = ("spec", "resources", "throughput_profile_workload")
        differs = ", ".join(f"{what} {m:g} -> {d:g} tokens" for what, m, d in apart)
        out.append(SpecIssue(
            loaded.file, loaded.line_of(*path), ".".join(path),
            f"{loaded.name}: throughput_profile was measured on another workload than the one declared "
            f"({differs}); its requests/s hold for the tokens they were measured on, and the scheduler sizes "
            f"{loaded.name} with them as given. Measure again at the declared workload and update both, or "
            f"correct workload if it is the one that is out of date", loaded.index))
    return out


def _apart(measured: float, declared: float) -> bool:
    """Whether two token means differ by more than ``STALE_SHARE`` of the larger (0 and 0 agree)."""
    top = max(measured, declared)
    return top > 0 and abs(measured - declared) > STALE_SHARE * top
