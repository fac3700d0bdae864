"""What a million output tokens of serving cost and draw: rented GPU-hours (cloud), amortised purchase
plus electricity (owned), and the energy of GPUs and hosts, for an hour of serving at the simulated
throughput, priced and powered as `scalesim.costs.economics` does training."""

from __future__ import annotations

from scalesim.costs import economics as econ


def per_million_tokens(setup, tokens_per_s: float, busy_fraction: float) -> tuple[dict, dict | None]:
    """({cloud, owned} USD, {it, facility} kWh: GPUs and hosts, before and after PUE) per million
    output tokens of `setup` (app.serve.ServeSetup); None where there is no throughput or price. Servers,
    network and host power are charged as training charges them (app/procurement.py nodes_charged): a run on
    part of a node pays its GPUs' share of it."""
    from scalesim.app.procurement import nodes_charged, nodes_used, ownership

    if tokens_per_s <= 0:
        return {"cloud": None, "owned": None}, None
    scenario, gpu, hour = setup.scenario, setup.gpu, econ.SECONDS_PER_HOUR
    per_million = 1e6 / (tokens_per_s * hour)
    price = scenario.pricing.gpu_hour_usd if scenario.pricing.gpu_hour_usd is not None else gpu.cloud_usd_per_gpu_hour
    cloud = None if price is None else econ.cloud_cost_usd(setup.gpus, hour, price)
    own, _ = ownership(scenario, gpu.list_price_usd, nodes_used(scenario, setup.gpus, setup.file, setup.catalog),
                       setup.file, setup.catalog)
    nodes, _ = nodes_charged(scenario, setup.gpus, setup.file, setup.catalog)
    energy = econ.energy_kwh(gpu=gpu, gpus=setup.gpus, nodes=nodes, host_power_w=own.host_power_w,
                             busy_fraction=busy_fraction, computing_s=hour, stalled_s=0.0)
    it_kwh = energy["gpu"] + energy["host"]
    capex = econ.capex_usd(own, setup.gpus, nodes)
    owned = None
    if capex is not None:
        power = it_kwh * own.pue * scenario.pricing.electricity_usd_per_kwh
        owned = econ.amortised_usd(sum(capex.values()), own.amortisation_years, hour, own.utilisation) + power
    return ({"cloud": None if cloud is None else cloud * per_million,
             "owned": None if owned is None else owned * per_million},
            {"it": it_kwh * per_million, "facility": it_kwh * own.pue * per_million})
