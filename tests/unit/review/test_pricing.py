"""`skyinfra prices`: the AWS Price List Query API (GetProducts) through boto3 over real HTTP,
answered by a stub server on loopback that checks the filters it is sent; the table it
writes is what `plan` prices with under SKYINFRA_PRICES."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skyinfra.errors import ConfigError
from skyinfra.review.cost import PRICES_ENV, price_table
from tests.conftest import skyinfra_argv


def product(instance_type: str, usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type, "regionCode": "us-east-1"}},
            "terms": {
                "OnDemand": {
                    "X.JRTCKXETXF": {
                        "priceDimensions": {
                            "X.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": usd},
                            }
                        }
                    }
                }
            },
        }
    )


@pytest.fixture
def pricing_api() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """GetProducts on 127.0.0.1: p5.48xlarge at $55.04, nothing for other types."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            target = self.headers.get("X-Amz-Target", "")
            seen.append({"target": target, **body})
            filters = {f["Field"]: f["Value"] for f in body.get("Filters", [])}
            listed = (
                [product("p5.48xlarge", "55.0400000000")]
                if filters.get("instanceType") == "p5.48xlarge"
                else []
            )
            answer = json.dumps({"FormatVersion": "aws_v1", "PriceList": listed}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_prices_refresh_writes_the_table_plan_uses(
    pricing_api: tuple[str, list[dict[str, Any]]],
    clean_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = pricing_api
    env = {
        **clean_env,
        "SKYINFRA_AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    out = tmp_path / "prices.json"
    proc = subprocess.run(
        [
            *skyinfra_argv(),
            "prices",
            "--region",
            "us-east-1",
            "--instance-type",
            "p5.48xlarge",
            "--instance-type",
            "p9z.mega",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "p5.48xlarge: $55.04/h" in proc.stdout
    assert "no on-demand Linux price for p9z.mega in us-east-1" in proc.stdout
    assert {call["target"] for call in seen} == {"AWSPriceListService.GetProducts"}
    filters = {f["Field"]: f["Value"] for f in seen[0]["Filters"]}
    assert seen[0]["ServiceCode"] == "AmazonEC2"
    assert filters["operatingSystem"] == "Linux" and filters["tenancy"] == "Shared"
    assert filters["capacitystatus"] == "Used" and filters["preInstalledSw"] == "NA"

    monkeypatch.setenv(PRICES_ENV, str(out))
    table = price_table()
    assert table.hourly("us-east-1", "p5.48xlarge") == 55.04
    assert table.hourly("us-east-1", "g4dn.xlarge") == 0.526  # shipped rows are kept
    assert "AWS Price List Query API (GetProducts)" in table.source
    assert os.stat(out).st_size > 0


def test_a_bad_price_table_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad.json").write_text('{"source": "x"}')
    monkeypatch.setenv(PRICES_ENV, str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError) as err:
        price_table()
    assert err.value.variable == PRICES_ENV
