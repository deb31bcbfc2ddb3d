"""moto's server (tests/support/aws_fixtures.py) logs each AWS SDK retry it answers, so that a
failing AWS test's captured log shows whether a call that found its work already done was a
retry of an attempt whose answer got lost."""

from __future__ import annotations

import http.client
import logging
from urllib.parse import urlsplit

import pytest


def post(moto_url: str, headers: dict[str, str]) -> int:
    address = urlsplit(moto_url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        conn.request(
            "POST",
            "/",
            body="Action=DescribeRegions&Version=2016-11-15",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                # A SigV4 scope names the service and region moto dispatches to.
                "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/"
                "aws4_request, SignedHeaders=host, Signature=0",
                **headers,
            },
        )
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_retried_call_is_logged_with_its_attempt_and_invocation(
    moto_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        first = post(
            moto_url, {"amz-sdk-request": "attempt=1; max=3", "amz-sdk-invocation-id": "a1"}
        )
        again = post(
            moto_url, {"amz-sdk-request": "attempt=2; max=3", "amz-sdk-invocation-id": "a1"}
        )
    assert (first, again) == (200, 200)
    retried = [r.getMessage() for r in caplog.records if "retried call" in r.getMessage()]
    assert len(retried) == 1, retried  # the first attempt is no retry
    assert retried[0].endswith("retried call (attempt=2; max=3, invocation a1) answered 200")
