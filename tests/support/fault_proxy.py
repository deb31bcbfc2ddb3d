"""A fault-injecting HTTP proxy on loopback in front of moto's server.

Terraform (the real AWS provider) and boto3 talk to the proxy as if it were the AWS API. It
passes every request through to moto, except:

- ``RunInstances`` into a zone given a :class:`Refusal` (one with ``market = "spot"``: only
  the launches with Spot market options, ``InstanceMarketOptions.MarketType=spot``, as EC2
  refuses Spot alone when the zone has no Spot capacity): answered with the error AWS returns
  (its XML error body and HTTP status), so the provider meets the failure exactly as it would
  meet it from EC2. The zone comes from the request (``Placement.AvailabilityZone``) or from
  the subnet it names (``SubnetId``, ``NetworkInterface.N.SubnetId``), looked up in moto.
- actions given a canned answer (``answers``): moto does not implement them (such as
  ``DescribeCapacityReservations``), so the proxy answers with the XML EC2 would.

EC2's error envelope and status codes: client errors come with a 4xx status, server errors
(``InsufficientInstanceCapacity`` among them) with a 5xx one:
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
"""

from __future__ import annotations

import http.client
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3


@dataclass
class Refusal:
    """What RunInstances in one zone answers: ``code`` and ``message`` (``{type}`` and
    ``{zone}`` filled in) with HTTP ``status``; ``times`` None refuses for ever, else that
    many launches and then passes them through. A launch is one RunInstances call of the
    client with its retries (the AWS SDKs send the same amz-sdk-invocation-id header on
    every retry of a call), so the SDK's own retries do not use up the refusals."""

    code: str
    message: str
    status: int
    times: int | None = None
    # "spot": only Spot launches are refused (On-Demand ones pass); None: every launch.
    market: str | None = None


def insufficient_capacity(times: int | None = None) -> Refusal:
    # The text EC2 returns (HTTP 500: a server error).
    return Refusal(
        "InsufficientInstanceCapacity",
        "We currently do not have sufficient {type} capacity in the Availability Zone you "
        "requested ({zone}). Our system will be working on provisioning additional capacity. "
        "You can currently get {type} capacity by not specifying an Availability Zone in your "
        "request or choosing us-east-1b, us-east-1c.",
        500,
        times,
    )


def no_spot_capacity(times: int | None = None) -> Refusal:
    # EC2's answer to a Spot launch the zone has no Spot capacity for (HTTP 500, the same code
    # as On-Demand's); On-Demand launches into the zone still pass.
    return Refusal(
        "InsufficientInstanceCapacity",
        "There is no Spot capacity available that matches your request.",
        500,
        times,
        market="spot",
    )


def vcpu_limit_exceeded() -> Refusal:
    # A client error (HTTP 400): the account's vCPU quota, the same in every zone.
    return Refusal(
        "VcpuLimitExceeded",
        "You have requested more vCPU capacity than your current vCPU limit of 0 allows for "
        "the instance bucket that the specified instance type belongs to. Please visit "
        "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
        400,
    )


def error_body(code: str, message: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        f"</Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )


def capacity_reservations_body(reservations: list[dict[str, Any]]) -> str:
    """DescribeCapacityReservations' answer for ``reservations`` (id, type, zone, total,
    available, state, and optionally reservation_type "capacity-block")."""
    items = "".join(
        "<item>"
        f"<capacityReservationId>{r['id']}</capacityReservationId>"
        f"<instanceType>{r['type']}</instanceType>"
        "<instancePlatform>Linux/UNIX</instancePlatform>"
        f"<availabilityZone>{r['zone']}</availabilityZone>"
        f"<totalInstanceCount>{r['total']}</totalInstanceCount>"
        f"<availableInstanceCount>{r['available']}</availableInstanceCount>"
        f"<state>{r.get('state', 'active')}</state>"
        f"<instanceMatchCriteria>{r.get('match', 'targeted')}</instanceMatchCriteria>"
        f"<reservationType>{r.get('reservation_type', 'default')}</reservationType>"
        "</item>"
        for r in reservations
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId>"
        f"<capacityReservationSet>{items}</capacityReservationSet>"
        "</DescribeCapacityReservationsResponse>"
    )


def spot_placement_scores_body(scores: dict[str, int]) -> str:
    """GetSpotPlacementScores' answer: zone id (``use1-az1``: EC2 names zones by id here)
    -> score, as EC2 writes it."""
    items = "".join(
        f"<item><availabilityZoneId>{zone_id}</availabilityZoneId><score>{score}</score></item>"
        for zone_id, score in scores.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<GetSpotPlacementScoresResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>{uuid.uuid4()}</requestId>"
        f"<spotPlacementScoreSet>{items}</spotPlacementScoreSet>"
        "</GetSpotPlacementScoresResponse>"
    )


# The region in a SigV4 Authorization header: Credential=KEY/DATE/REGION/SERVICE/aws4_request.
_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/")


class FaultProxy:
    """See the module docstring. ``refuse``: zone -> Refusal; ``answers``: EC2 action ->
    XML body (HTTP 200); ``refused``: how many RunInstances each zone refused so far;
    ``asked``: the form of each request given a canned answer, by action."""

    def __init__(self, upstream: str, region: str) -> None:
        self.upstream = upstream
        self.region = region
        self.refuse: dict[str, Refusal] = {}
        self.answers: dict[str, Callable[[], str]] = {}
        self.asked: dict[str, list[dict[str, list[str]]]] = {}
        self.refused: Counter[str] = Counter()  # launches refused per zone
        self._refused_calls: set[str] = set()
        self.run_instances: Counter[str] = Counter()  # RunInstances seen per zone
        self._zones: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.refuse.clear()
            self.answers.clear()
            self.asked.clear()
            self.refused.clear()
            self._refused_calls.clear()
            self.run_instances.clear()

    def _subnet_zone(self, subnet_id: str, region: str) -> str | None:
        if subnet_id not in self._zones:
            ec2 = boto3.client(
                "ec2",
                region_name=region,
                endpoint_url=self.upstream,
                aws_access_key_id="test",
                aws_secret_access_key="test",
            )
            subnets = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
            self._zones[subnet_id] = subnets[0]["AvailabilityZone"] if subnets else ""
        return self._zones[subnet_id] or None

    def _zone_of(self, form: dict[str, list[str]], region: str) -> str | None:
        for key, values in form.items():
            if key == "Placement.AvailabilityZone" and values[0]:
                return values[0]
        for key, values in form.items():
            is_subnet = key == "SubnetId" or (
                key.startswith("NetworkInterface.") and key.endswith(".SubnetId")
            )
            if is_subnet and values[0]:
                return self._subnet_zone(values[0], region)
        return None

    def _decide(self, body: bytes, call: str, region: str | None = None) -> tuple[int, str] | None:
        """(status, XML) to answer instead of moto, or None to pass the request through.
        ``region``: the request's (its signature's scope; default the proxy's)."""
        try:
            form = parse_qs(body.decode(), keep_blank_values=True)
        except UnicodeDecodeError:
            return None
        action = (form.get("Action") or [""])[0]
        if action in self.answers:
            with self._lock:
                self.asked.setdefault(action, []).append(form)
            return 200, self.answers[action]()
        if action != "RunInstances":
            return None
        zone = self._zone_of(form, region or self.region)
        if zone is None:
            return None
        with self._lock:
            self.run_instances[zone] += 1
            refusal = self.refuse.get(zone)
            if refusal is None:
                return None
            market = (form.get("InstanceMarketOptions.MarketType") or [""])[0]
            if refusal.market is not None and market != refusal.market:
                return None
            if call not in self._refused_calls:
                if refusal.times is not None and self.refused[zone] >= refusal.times:
                    return None
                self.refused[zone] += 1
                if call:
                    self._refused_calls.add(call)
        kind = (form.get("InstanceType") or ["?"])[0]
        message = refusal.message.format(type=kind, zone=zone)
        return refusal.status, error_body(refusal.code, message)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # One request per connection: no keep-alive state to get wrong between clients.
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                call = self.headers.get("amz-sdk-invocation-id") or ""
                scope = _SCOPE.search(self.headers.get("Authorization") or "")
                region = scope.group(1) if scope else None
                decided = proxy._decide(body, call, region) if self.command == "POST" else None
                if decided is not None:
                    status, text = decided
                    data = text.encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "text/xml;charset=UTF-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                up = urlsplit(proxy.upstream)
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    headers["Host"] = up.netloc
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    skip = ("transfer-encoding", "connection", "content-length")
                    for key, value in answer.getheaders():
                        if key.lower() not in skip:
                            self.send_header(key, value)
                    length = answer.getheader("Content-Length") if self.command == "HEAD" else None
                    self.send_header("Content-Length", length or str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        return Handler


@contextmanager
def fault_proxy(upstream: str, region: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, region).start()
    try:
        yield proxy
    finally:
        proxy.stop()
