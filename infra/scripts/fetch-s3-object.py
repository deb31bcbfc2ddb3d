#!/usr/bin/env python3
"""Download one S3 object with the node's own credentials: run by provision.sh on an AWS node.

Usage: fetch-s3-object.py URL REGION OUTPUT

URL is the object's plain address (https://BUCKET.s3.REGION.amazonaws.com/KEY), with no
credentials in it: the request is signed here (Signature Version 4, standard library only,
so a bare AMI's python3 is enough) with the instance role's temporary credentials from the
instance metadata service (IMDSv2). The role may read only its cluster's staged objects (the
nodes module's staged-read policy). AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
AWS_SESSION_TOKEN) in the environment take precedence, as for the AWS SDKs; tests use them
with an emulator. AWS_EC2_METADATA_SERVICE_ENDPOINT moves the metadata service.

A fresh instance profile can take a while to reach a new instance (IAM is eventually
consistent), so failures are retried for up to FETCH_DEADLINE_S seconds (default 600).

SigV4 for S3: https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
IMDSv2: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# A GET has no body: its payload hash is that of the empty string.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _get(url: str, headers: dict[str, str], method: str = "GET") -> bytes:
    request = urllib.request.Request(url, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def imds_credentials() -> tuple[str, str, str | None]:
    base = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254")
    base = base.rstrip("/")
    token = _get(
        f"{base}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "300"}, "PUT"
    ).decode()
    headers = {"X-aws-ec2-metadata-token": token}
    roles = f"{base}/latest/meta-data/iam/security-credentials/"
    role = _get(roles, headers).decode().split()[0]
    document = json.loads(_get(roles + role, headers))
    return document["AccessKeyId"], document["SecretAccessKey"], document.get("Token")


def credentials() -> tuple[str, str, str | None]:
    key = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        return key, secret, os.environ.get("AWS_SESSION_TOKEN") or None
    return imds_credentials()


def signed_headers(
    url: str, region: str, creds: tuple[str, str, str | None], now: datetime.datetime
) -> dict[str, str]:
    """The headers of a SigV4-signed GET of ``url`` (an S3 object) at ``now`` (UTC)."""
    parts = urllib.parse.urlsplit(url)
    key, secret, token = creds
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    headers = {"host": parts.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join(
        ["GET", parts.path or "/", parts.query]
        + [f"{name}:{headers[name].strip()}" for name in names]
        + ["", signed, EMPTY_SHA256]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    signing_key = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    del headers["host"]  # urllib sets it, to the same value
    return headers


def fetch(url: str, region: str, output: str, deadline_s: float) -> None:
    give_up = time.monotonic() + deadline_s
    delay = 2.0
    while True:
        try:
            now = datetime.datetime.now(datetime.timezone.utc)
            body = _get(url, signed_headers(url, region, credentials(), now))
            break
        except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError) as err:
            if time.monotonic() + delay > give_up:
                sys.exit(f"fetch-s3-object: {url}: {err}")
            print(f"fetch-s3-object: {err}; retrying in {delay:.0f}s", file=sys.stderr)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    partial = output + ".part"
    with open(partial, "wb") as handle:
        handle.write(body)
    os.replace(partial, output)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: fetch-s3-object.py URL REGION OUTPUT")
    url, region, output = sys.argv[1:4]
    fetch(url, region, output, deadline_s=float(os.environ.get("FETCH_DEADLINE_S", "600")))
