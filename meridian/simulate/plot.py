"""PNG plots of a comparison: cost per hour and SLO attainment over the simulated day, one line per
policy. matplotlib is imported here only (Agg backend, no display needed), so the simulator and the
CLI load without it until ``--plot`` is asked for."""

from __future__ import annotations

import pathlib

from meridian.simulate import runner

PLOTS = ("cost.png", "slo_attainment.png")


def write(cmp: runner.Comparison, out_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """Write the plots into ``out_dir`` (created if missing); returns their paths."""
    import matplotlib  # noqa: PLC0415  (optional heavy dependency, only for --plot)

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{cmp.scenario.name} scenario, seed {cmp.scenario.seed}"
    paths = []

    fig, (ax_rate, ax_total) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for r in cmp.results:
        t = r.series["t_h"]
        rate = r.series["cost_per_hour_usd"]
        ax_rate.plot(t, rate, label=f"{r.policy} (${r.cost_usd:,.0f})", linewidth=1.4)
        cumulative, acc = [], 0.0
        step_h = (t[1] - t[0]) if len(t) > 1 else 1.0
        for x in rate:
            acc += x * step_h
            cumulative.append(acc)
        ax_total.plot(t, cumulative, label=r.policy, linewidth=1.4)
    ax_rate.set_ylabel("cost, $/hour")
    ax_rate.set_title(f"Cost over time: {title}")
    ax_rate.legend(fontsize=8)
    ax_rate.grid(alpha=0.3)
    ax_total.set_ylabel("cumulative cost, $")
    ax_total.set_xlabel("hours since start")
    ax_total.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / PLOTS[0])
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for r in cmp.results:
        att = [100.0 * a if a is not None else float("nan") for a in r.series["attainment"]]
        ax.plot(r.series["t_h"], att, label=f"{r.policy} ({100.0 * r.total.attainment:.2f}%)", linewidth=1.4)
    ax.set_ylabel("requests within SLO, % (5-minute buckets)")
    ax.set_xlabel("hours since start")
    ax.set_title(f"SLO attainment over time: {title}")
    ax.set_ylim(top=100.5)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / PLOTS[1])
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
