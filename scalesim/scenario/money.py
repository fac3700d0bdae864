"""A scenario's money, risk and uncertainty sections: prices, ownership costs, failures, Monte-Carlo spreads."""

from __future__ import annotations

import pydantic

from scalesim.schema import Strict


class OwnershipSpec(Strict):
    """On-premises costs; None takes the documented default (scalesim/costs/economics.py)."""

    gpu_usd: pydantic.NonNegativeFloat | None = None              # [catalog list_price_usd]
    server_usd: pydantic.NonNegativeFloat | None = None           # per node, without GPUs [by design]
    network_usd_per_node: pydantic.NonNegativeFloat | None = None  # [per NIC port; 0 for one node]
    host_power_w: pydantic.NonNegativeFloat | None = None         # per node, all but GPUs [by design]
    amortisation_years: pydantic.PositiveFloat = 4.0
    pue: float = pydantic.Field(1.58, ge=1.0)                     # Uptime Institute 2023 average
    utilisation: float | None = pydantic.Field(None, gt=0.0, le=1.0)  # share of its life the cluster trains
                                                                        # [economics.UTILISATION, 0.80]


class PricingSpec(Strict):
    gpu_hour_usd: pydantic.NonNegativeFloat | None = None
    electricity_usd_per_kwh: pydantic.NonNegativeFloat = 0.15
    ownership: OwnershipSpec = OwnershipSpec()


class ReliabilitySpec(Strict):
    """Failures and checkpoints; None takes the documented default (scalesim/costs/reliability.py)."""

    failure_rate_per_gpu_hour: pydantic.NonNegativeFloat | None = None   # [by ECC: Llama 3, or 2x]
    storage_write_GBps_per_node: pydantic.PositiveFloat = 1.0            # checkpoint writes, per node
    checkpoint_GB: pydantic.PositiveFloat | None = None                  # [weights + optimizer state]
    checkpoint_interval_s: pydantic.PositiveFloat | None = None          # [Young/Daly optimum]
    restart_s: pydantic.NonNegativeFloat = 900.0


class UncertaintySpec(Strict):
    """Monte-Carlo spreads for --samples: each factor's P90/P50 ratio (lognormal, median 1)."""

    seed: pydantic.NonNegativeInt = 0
    step_time: float = pydantic.Field(1.17, ge=1.0)
    failure_rate: float = pydantic.Field(3.0, ge=1.0)
    gpu_hour_price: float = pydantic.Field(1.5, ge=1.0)
    purchase_price: float = pydantic.Field(1.2, ge=1.0)
    electricity_price: float = pydantic.Field(1.3, ge=1.0)
