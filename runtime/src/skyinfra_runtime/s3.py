"""A small S3 client for the nodes (standard library only): SigV4-signed GET, PUT, DELETE and
ListObjectsV2 with the instance role's credentials (IMDSv2), or the ``AWS_*`` variables when
set (the tests: moto on loopback).

The same signing as infra/scripts/fetch-s3-object.py (which fetches the runtime wheel before
the runtime is installed), made general: any method, a query string, a payload hash.
https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Bucket names: 3-63 characters, lower-case letters, digits, dots and dashes, starting and
# ending with a letter or digit, not an IP address, no "..":
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A prefix we accept: path segments of safe characters (no "." or ".." segments, no "//"; no
# "*" or "?", which the nodes' IAM policy would read as wildcards).
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_.=+-]{1,200}$")
URL_EXPECTED = (
    "s3://BUCKET/PREFIX: a bucket name (3-63 of a-z, 0-9, '.', '-', not an IP address) and a "
    "non-empty prefix of path segments (letters, digits and _.=+-), no trailing '/'"
)
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
CREDENTIALS_TTL_S = 300.0


def url_problem(url: object) -> str | None:
    """Why ``url`` is not an ``s3://bucket/prefix`` we accept (None: it is)."""
    if not isinstance(url, str) or not url.startswith("s3://"):
        return "it does not start with s3://"
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not BUCKET_RE.match(bucket) or ".." in bucket or re.match(r"^\d+\.\d+\.\d+\.\d+$", bucket):
        return f"bucket {bucket!r} breaks S3's naming rules"
    if bucket.startswith("xn--") or bucket.endswith("-s3alias"):
        return f"bucket {bucket!r} breaks S3's naming rules (reserved prefix or suffix)"
    if not prefix:
        return "it has no prefix after the bucket"
    if any(seg in (".", "..") or not _SEGMENT_RE.match(seg) for seg in prefix.split("/")):
        return f"prefix {prefix!r} has an empty, '.', '..' or unsafe path segment"
    return None


def parse_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ("bucket", "a/b"); ValueError naming the value and what is valid."""
    problem = url_problem(url)
    if problem:
        raise ValueError(
            f"{url!r} is not a checkpoint location ({problem}); expected {URL_EXPECTED}"
        )
    bucket, _, prefix = url[len("s3://") :].partition("/")
    return bucket, prefix


@dataclass(frozen=True)
class Credentials:
    key: str
    secret: str
    token: str | None = None


def _request(url: str, method: str, headers: dict[str, str], timeout: float = 10) -> bytes:
    parts = urllib.parse.urlsplit(url)
    conn_cls = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    conn = conn_cls(parts.netloc, timeout=timeout)
    try:
        conn.request(method, parts.path or "/", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status >= 300:
            raise OSError(f"{method} {url}: HTTP {resp.status}")
        return body
    finally:
        conn.close()


class CredentialSource:
    """``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` when set, else the instance role's
    temporary credentials from IMDSv2 (renewed every CREDENTIALS_TTL_S)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self._env = dict(os.environ if environ is None else environ)
        self._cached: Credentials | None = None
        self._at = 0.0
        self._lock = threading.Lock()

    def get(self) -> Credentials:
        env = self._env
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            return Credentials(
                env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
            )
        with self._lock:
            if self._cached is None or time.monotonic() - self._at > CREDENTIALS_TTL_S:
                self._cached, self._at = self._from_imds(), time.monotonic()
            return self._cached

    def _from_imds(self) -> Credentials:
        base = self._env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254")
        base = base.rstrip("/")
        ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "300"}
        token = _request(f"{base}/latest/api/token", "PUT", ttl, 2).decode()
        headers = {"X-aws-ec2-metadata-token": token}
        roles = f"{base}/latest/meta-data/iam/security-credentials/"
        role = _request(roles, "GET", headers, 2).decode().split()[0]
        doc = json.loads(_request(roles + role, "GET", headers, 2))
        return Credentials(doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token"))


def _quote(text: str, safe: str = "-_.~") -> str:
    return urllib.parse.quote(text, safe=safe)


def canonical_query(query: dict[str, str]) -> str:
    """SigV4's canonical query string: names and values URI-encoded, sorted by name."""
    return "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))


def sign(
    method: str,
    url: str,
    region: str,
    creds: Credentials,
    payload_sha256: str,
    now: datetime.datetime,
) -> dict[str, str]:
    """The headers that sign a request to ``url`` (path already URI-encoded, query already
    canonical) with SigV4 for service s3; ``host`` is left out (the HTTP client sends it)."""
    parts = urllib.parse.urlsplit(url)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_sha256, "x-amz-date": stamp}
    if creds.token:
        headers["x-amz-security-token"] = creds.token
    signed = ";".join(sorted(headers))
    lines = [f"{name}:{headers[name].strip()}" for name in sorted(headers)]
    canonical = "\n".join(
        [method, parts.path or "/", parts.query, *lines, "", signed, payload_sha256]
    )
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    key = ("AWS4" + creds.secret).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    message = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}".encode()
    signature = hmac.new(key, message, hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.key}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    del headers["host"]
    return headers


class S3Error(OSError):
    def __init__(self, method: str, key: str, status: int, body: bytes) -> None:
        self.status = status
        code = re.search(rb"<Code>([^<]*)</Code>", body)
        what = code.group(1).decode() if code else body[:200].decode(errors="replace")
        super().__init__(f"S3 {method} {key!r}: HTTP {status} {what}")


class Bucket:
    """One bucket reached at ``base`` (``https://BUCKET.s3.REGION.amazonaws.com``, or
    path-style ``http://127.0.0.1:PORT/BUCKET`` for an emulator)."""

    def __init__(
        self, base: str, region: str, creds: CredentialSource | None = None, timeout: float = 60
    ) -> None:
        self.base = base.rstrip("/")
        self.region = region
        self.creds = creds or CredentialSource()
        self.timeout = timeout
        self.sent_bytes = 0

    def _call(
        self,
        method: str,
        key: str,
        *,
        query: dict[str, str] | None = None,
        body: BinaryIO | bytes | None = None,
        size: int = 0,
        payload_sha256: str = EMPTY_SHA256,
        out: BinaryIO | None = None,
        ok_missing: bool = False,
    ) -> bytes | None:
        url = f"{self.base}/{_quote(key, safe='/-_.~')}" if key else f"{self.base}/"
        if query:
            url += "?" + canonical_query(query)
        now = datetime.datetime.now(datetime.timezone.utc)
        headers = sign(method, url, self.region, self.creds.get(), payload_sha256, now)
        if body is not None:
            headers["content-length"] = str(size if not isinstance(body, bytes) else len(body))
        parts = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.netloc, timeout=self.timeout)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            if resp.status == 404 and ok_missing:
                resp.read()
                return None
            if resp.status >= 300:
                raise S3Error(method, key, resp.status, resp.read())
            if out is not None:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                return b""
            data = resp.read()
        finally:
            conn.close()
        if body is not None:
            self.sent_bytes += size if not isinstance(body, bytes) else len(body)
        return data

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        return self._call("GET", key, ok_missing=True)

    def download(self, key: str, out: BinaryIO) -> None:
        self._call("GET", key, out=out)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("PUT", key, body=data, payload_sha256=hashlib.sha256(data).hexdigest())

    def put_file(self, key: str, handle: BinaryIO, size: int, sha256: str) -> None:
        """Stream ``size`` bytes from ``handle``; signed with their sha256, so S3 refuses the
        upload (XAmzContentSHA256Mismatch) when the file changed since it was hashed."""
        self._call("PUT", key, body=handle, size=size, payload_sha256=sha256)

    def delete(self, key: str) -> None:
        self._call("DELETE", key, ok_missing=True)

    def list(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix`` (ListObjectsV2, page by page)."""
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            data = self._call("GET", "", query=query) or b""
            root = ET.fromstring(data)
            ns = _S3_NS if root.tag.startswith(_S3_NS) else ""
            for item in root.iter(f"{ns}Contents"):
                key = item.findtext(f"{ns}Key")
                if key is not None:
                    yield key
            token = root.findtext(f"{ns}NextContinuationToken") or ""
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return
