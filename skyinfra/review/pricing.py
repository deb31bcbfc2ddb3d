"""Refresh the price table through the AWS Price List Query API (boto3 ``pricing``,
GetProducts): on-demand Linux, shared tenancy, no pre-installed software, the region's own
price. https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html

`skyinfra prices --refresh` writes a whole table (the shipped one with the fetched rows
replaced, its source and date saying so); ``SKYINFRA_PRICES=FILE`` makes `plan` use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from skyinfra.review.cost import PriceTable

# The Price List API answers in these regions only (its endpoint, not the prices' region).
PRICING_REGION = "us-east-1"


def product_filters(region: str, instance_type: str) -> list[dict[str, str]]:
    pairs = {
        "regionCode": region,
        "instanceType": instance_type,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in pairs.items()]


def on_demand_usd(product: Mapping[str, Any]) -> float | None:
    """The hourly USD price in one PriceList entry's OnDemand terms (None: none above 0)."""
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") not in (None, "Hrs"):
                continue
            price = float(dimension.get("pricePerUnit", {}).get("USD", "0") or 0)
            if price > 0:
                return price
    return None


def fetch_prices(client: Any, region: str, instance_types: Iterable[str]) -> dict[str, float]:
    """Instance type -> $/h for those the API prices (a type it does not know is left out)."""
    found: dict[str, float] = {}
    for instance_type in sorted(set(instance_types)):
        pages = client.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2",
            Filters=product_filters(region, instance_type),
            FormatVersion="aws_v1",
        )
        for page in pages:
            for entry in page.get("PriceList", []):
                product = json.loads(entry) if isinstance(entry, str) else entry
                price = on_demand_usd(product)
                if price is not None:
                    found[instance_type] = price
                    break
            if instance_type in found:
                break
    return found


def refreshed(
    shipped: PriceTable, region: str, prices: Mapping[str, float], today: str
) -> dict[str, Any]:
    """The table to write: ``shipped`` with ``prices`` for ``region``, saying where each
    came from."""
    regions = {r: dict(types) for r, types in shipped.regions.items()}
    regions.setdefault(region, {}).update(prices)
    names = ", ".join(sorted(prices)) or "nothing"
    return {
        "about": "EC2 on-demand list prices, Linux, USD per instance-hour (instances only).",
        "source": f"{shipped.source} (as of {shipped.date}); {names} in {region} from the AWS "
        f"Price List Query API (GetProducts) on {today}",
        "date": today,
        "currency": "USD",
        "regions": {r: dict(sorted(t.items())) for r, t in sorted(regions.items())},
        # The network's prices (issue 46) are not refreshed: kept as shipped.
        "network_source": shipped.network_source,
        "network": {r: dict(p) for r, p in sorted(shipped.network.items())},
    }
