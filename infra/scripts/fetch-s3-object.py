#!/usr/bin/env python3
"""fetch-s3-object.py URL REGION OUT: GET an S3 object signed (SigV4) with the instance
role's credentials (IMDSv2; AWS_* variables first), retrying for FETCH_DEADLINE_S (600) s.
Run by provision.sh; skyinfra/targets/aws/staging.py says why.

fetch-s3-object.py --wheelhouse INDEX_URL REGION SHA256 DIR: the S3 wheelhouse of a private
network (skyinfra/targets/aws/wheelhouse.py): its index object, checked against SHA256, then
every wheel it lists (its "files": name, sha256) from beside it into DIR, each checked."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.parse
import urllib.request

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()  # a GET's payload


def _get(url: str, headers: dict[str, str], method: str = "GET") -> bytes:
    request = urllib.request.Request(url, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def credentials() -> tuple[str, str, str | None]:
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
    base = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254").rstrip("/")
    ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "300"}
    headers = {"X-aws-ec2-metadata-token": _get(f"{base}/latest/api/token", ttl, "PUT").decode()}
    roles = f"{base}/latest/meta-data/iam/security-credentials/"
    doc = json.loads(_get(roles + _get(roles, headers).decode().split()[0], headers))
    return doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token")


def signed_headers(
    url: str, region: str, creds: tuple[str, str, str | None], now: datetime.datetime
) -> dict[str, str]:
    parts = urllib.parse.urlsplit(url)
    key, secret, token = creds
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": parts.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    lines = [f"{name}:{headers[name].strip()}" for name in sorted(headers)]
    canonical = "\n".join(["GET", parts.path or "/", parts.query, *lines, "", signed, EMPTY_SHA256])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    signing_key = ("AWS4" + secret).encode()
    for part in scope.split("/"):
        signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
    message = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}".encode()
    signature = hmac.new(signing_key, message, hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    del headers["host"]
    return headers


def _download(url: str, headers: dict[str, str], output: str) -> str:
    """Stream the object to OUTPUT.part (a wheel may be GBs); its sha256."""
    digest = hashlib.sha256()
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response, open(output + ".part", "wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def main(url: str, region: str, output: str, sha256: str | None = None) -> None:
    give_up = time.monotonic() + float(os.environ.get("FETCH_DEADLINE_S", "600"))
    delay = 2.0
    while True:
        try:
            now = datetime.datetime.now(datetime.timezone.utc)
            got = _download(url, signed_headers(url, region, credentials(), now), output)
            break
        except (OSError, LookupError, ValueError) as err:
            if time.monotonic() + delay > give_up:
                sys.exit(f"fetch-s3-object: {url}: {err}")
            print(f"fetch-s3-object: {err}; retrying in {delay:.0f}s", file=sys.stderr)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    if sha256 is not None and got != sha256:
        os.unlink(output + ".part")
        sys.exit(f"fetch-s3-object: {url}: sha256 {got}, expected {sha256}")
    os.replace(output + ".part", output)


def wheelhouse(index_url: str, region: str, sha256: str, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    index_file = os.path.join(folder, "index.json")
    main(index_url, region, index_file, sha256)
    with open(index_file, encoding="utf-8") as handle:
        files = json.load(handle)["files"]
    base = index_url.rsplit("/", 1)[0]
    for entry in files:
        name = os.path.basename(entry["name"])
        main(f"{base}/{urllib.parse.quote(name)}", region, os.path.join(folder, name), entry["sha256"])
    print(f"fetch-s3-object: {len(files)} wheels in {folder}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--wheelhouse":
        wheelhouse(*sys.argv[2:6])
    elif len(sys.argv) == 4:
        main(*sys.argv[1:4])
    else:
        sys.exit("usage: fetch-s3-object.py URL REGION OUTPUT | --wheelhouse URL REGION SHA256 DIR")
