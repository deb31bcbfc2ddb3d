"""A small S3 client for the nodes (standard library only): SigV4-signed GET, PUT, DELETE and
ListObjectsV2 with the instance role's credentials (IMDSv2), or the ``AWS_*`` variables when
set (the tests: moto on loopback). Files from MULTIPART_THRESHOLD up go as a multipart upload
(one PUT holds at most 5 GiB), streamed part by part, never read whole into memory.

The same signing as infra/scripts/fetch-s3-object.py (which fetches the runtime wheel before
the runtime is installed), made general: any method, a query string, a payload hash.
https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import http.client
    import xml.etree.ElementTree as ET

# http.client (with ssl) and xml.etree load on the first request, not with the module: every
# `skyinfra` command and most node processes import this module (through skyinfra_runtime's
# checkpoint sync and the operator's spec checks), and few of them send a request (about 10 ms
# of start-up each).

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

# S3's limits ("Amazon S3 multipart upload limits", S3 User Guide): one PUT at most 5 GiB; in
# a multipart upload every part but the last at least 5 MiB, at most 5 GiB, at most 10,000
# parts, an object at most 5 TiB.
MiB = 1024**2
SINGLE_PUT_MAX = 5 * 1024**3
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * 1024**3
MAX_PARTS = 10_000
MAX_OBJECT_SIZE = 5 * 1024**4
# Ours: a file of MULTIPART_THRESHOLD bytes or more goes in parts of PART_SIZE (larger when it
# would need more than MAX_PARTS). Below it, one PUT: one request, and the checkpoints of
# BENCHMARKS figure 12 (up to 128 MiB a file) go as before. Both settable (tests: a small
# file in several parts) through THRESHOLD_ENV and PART_SIZE_ENV, or Bucket's arguments.
MULTIPART_THRESHOLD = 256 * MiB
PART_SIZE = 64 * MiB
THRESHOLD_ENV = "SKYINFRA_S3_MULTIPART_THRESHOLD"
PART_SIZE_ENV = "SKYINFRA_S3_PART_SIZE"
_HASH_CHUNK = 1 * MiB


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


# Where a job's agents read the checkpoint store's credentials on their stdin (with the job's
# token and secrets), on nodes without an instance role (the ssh target's hosts).
PRIVATE_KEY = "checkpoint_store_credentials"


@dataclass(frozen=True)
class Credentials:
    key: str
    secret: str
    token: str | None = None

    def __repr__(self) -> str:  # never the secret, whoever prints this object
        return f"Credentials(key={self.key!r}, secret='***')"

    def to_private(self) -> dict[str, str]:
        """As the agents' stdin carries them (from_private reads them back)."""
        out = {"access_key_id": self.key, "secret_access_key": self.secret}
        if self.token:
            out["session_token"] = self.token
        return out

    @classmethod
    def from_private(cls, data: object) -> Credentials:
        """ValueError naming what is wrong (never a value: they are secret)."""
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object with access_key_id and secret_access_key")
        for name in ("access_key_id", "secret_access_key"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise ValueError(f"{name}: expected a non-empty string")
        token = data.get("session_token")
        if token is not None and not isinstance(token, str):
            raise ValueError("session_token: expected a string")
        return cls(data["access_key_id"], data["secret_access_key"], token or None)

    def as_environ(self) -> dict[str, str]:
        """The ``AWS_*`` variables CredentialSource reads (a mapping of its own, not
        os.environ)."""
        env = {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret}
        if self.token:
            env["AWS_SESSION_TOKEN"] = self.token
        return env


def _connection(
    url: str, timeout: float
) -> tuple[http.client.HTTPConnection, urllib.parse.SplitResult]:
    """A connection to ``url``'s host, HTTPS or HTTP by its scheme (not yet open), and the
    URL's parts. http.client, and ssl with it, loads here on the first request."""
    import http.client

    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.netloc, timeout=timeout), parts


def _request(url: str, method: str, headers: dict[str, str], timeout: float = 10) -> bytes:
    conn, parts = _connection(url, timeout)
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


def part_size_for(size: int, base: int = PART_SIZE) -> int:
    """The part size for a ``size``-byte object: ``base``, or the next whole MiB that keeps
    it within MAX_PARTS parts (a 5 TiB file: 525 MiB parts, 9,987 of them)."""
    if size > MAX_OBJECT_SIZE:
        raise ValueError(f"{size} B is over S3's limit of {MAX_OBJECT_SIZE} B (5 TiB) an object")
    need = -(-size // MAX_PARTS)
    return max(base, -(-need // MiB) * MiB)


def size_setting(name: str, value: object, low: int, high: int) -> int:
    """A byte count from an argument or an environment variable, within [low, high];
    ValueError naming the setting, the value and what is valid."""
    try:
        number = int(str(value).strip())
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise ValueError(f"{name}: {value!r} is not a number of bytes from {low} to {high}")
    return number


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


def _xml(method: str, key: str, body: bytes) -> ET.Element:
    """An answer's XML; one that is not XML is an S3Error (an OSError, as every failure
    here), not a ParseError. Leading white space is dropped: while it completes a multipart
    upload S3 sends spaces to keep the connection open, before the XML declaration
    ("CompleteMultipartUpload", Amazon S3 API Reference), which a parser refuses there."""
    import xml.etree.ElementTree as ET

    try:
        return ET.fromstring(body.lstrip())
    except ET.ParseError:
        raise S3Error(method, key, 200, body) from None


class _Part:
    """``length`` bytes of ``handle`` from where it stands, for http.client to stream; a file
    that ends sooner (it shrank since it was hashed) raises instead of sending short."""

    def __init__(self, handle: BinaryIO, length: int) -> None:
        self._handle = handle
        self._left = length

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        data = self._handle.read(self._left if n < 0 else min(n, self._left))
        if not data:
            raise OSError(f"the file ended {self._left} B early: it changed while uploaded")
        self._left -= len(data)
        return data


def _etag_is_md5(headers: dict[str, str]) -> bool:
    """Whether S3's ETag is the MD5 of the bytes: for plaintext and SSE-S3, not SSE-KMS or
    SSE-C ("Object", ETag, in the Amazon S3 API Reference)."""
    sse = headers.get("x-amz-server-side-encryption", "")
    return not sse.startswith("aws:kms") and not headers.get(
        "x-amz-server-side-encryption-customer-algorithm"
    )


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: str | None  # LastModified as S3 gives it, ISO 8601 ("2026-11-27T16:00:00.000Z")


class Bucket:
    """One bucket reached at ``base`` (``https://BUCKET.s3.REGION.amazonaws.com``, or
    path-style ``http://127.0.0.1:PORT/BUCKET`` for an emulator). ``multipart_threshold``,
    ``part_size``: None takes THRESHOLD_ENV and PART_SIZE_ENV, else the module's defaults."""

    def __init__(
        self,
        base: str,
        region: str,
        creds: CredentialSource | None = None,
        timeout: float = 60,
        *,
        multipart_threshold: int | None = None,
        part_size: int | None = None,
    ) -> None:
        self.base = base.rstrip("/")
        self.region = region
        self.creds = creds or CredentialSource()
        self.timeout = timeout
        self.sent_bytes = 0
        # A threshold over 5 GiB would send PUTs S3 refuses.
        threshold: object = multipart_threshold
        name = "multipart_threshold"
        if threshold is None:
            name, threshold = THRESHOLD_ENV, os.environ.get(THRESHOLD_ENV) or MULTIPART_THRESHOLD
        self.multipart_threshold = size_setting(name, threshold, 1, SINGLE_PUT_MAX)
        part: object = part_size
        name = "part_size"
        if part is None:
            name, part = PART_SIZE_ENV, os.environ.get(PART_SIZE_ENV) or PART_SIZE
        self.part_size = size_setting(name, part, MIN_PART_SIZE, MAX_PART_SIZE)

    # One signed S3 request: each keyword is a part of the request some call needs.
    def _call(  # noqa: PLR0913
        self,
        method: str,
        key: str,
        *,
        query: dict[str, str] | None = None,
        body: BinaryIO | _Part | bytes | None = None,
        size: int = 0,
        payload_sha256: str = EMPTY_SHA256,
        out: BinaryIO | None = None,
        ok_missing: bool = False,
        headers_in: dict[str, str] | None = None,
        headers_out: dict[str, str] | None = None,
    ) -> bytes | None:
        url = f"{self.base}/{_quote(key, safe='/-_.~')}" if key else f"{self.base}/"
        if query:
            url += "?" + canonical_query(query)
        now = datetime.datetime.now(datetime.timezone.utc)
        headers = sign(method, url, self.region, self.creds.get(), payload_sha256, now)
        headers.update(headers_in or {})
        if body is not None:
            headers["content-length"] = str(size if not isinstance(body, bytes) else len(body))
        conn, parts = _connection(url, self.timeout)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            if headers_out is not None:
                headers_out.update((k.lower(), v) for k, v in resp.getheaders())
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
        """Stream ``size`` bytes from ``handle`` (at its start) as the object ``key``, whose
        content must have ``sha256``. Below the multipart threshold one PUT, signed with that
        sha256, so S3 refuses it (XAmzContentSHA256Mismatch) when the file changed since it
        was hashed; from it up, a multipart upload (:meth:`put_multipart`)."""
        if size < self.multipart_threshold:
            self._call("PUT", key, body=handle, size=size, payload_sha256=sha256)
        else:
            self.put_multipart(key, handle, size, sha256)

    def put_multipart(self, key: str, handle: BinaryIO, size: int, sha256: str) -> int:
        """CreateMultipartUpload, UploadPart for each part, CompleteMultipartUpload; the number
        of parts. Each part is read twice, to hash it (sha256 to sign it, MD5 for Content-MD5
        and to check the ETag S3 answers) and to send it, neither holding more than 1 MiB.
        Any failure (a part refused, the file shorter than ``size`` or not the content
        ``sha256`` names any more) aborts the upload, so no parts are left stored (and billed),
        and raises."""
        part_size = part_size_for(size, self.part_size)
        created = self._call("POST", key, query={"uploads": ""}) or b""
        root = _xml("POST", key, created)
        upload_id = root.findtext(f"{_S3_NS if root.tag.startswith(_S3_NS) else ''}UploadId")
        if not upload_id:
            raise S3Error("POST", key, 200, created)
        try:
            parts = self._upload_parts(key, upload_id, handle, size, sha256, part_size)
            self._complete(key, upload_id, parts)
        except BaseException as err:
            try:
                self._call("DELETE", key, query={"uploadId": upload_id}, ok_missing=True)
            except OSError as abort_err:
                if isinstance(err, Exception):
                    raise OSError(
                        f"{err}; aborting multipart upload {upload_id} failed too ({abort_err}): "
                        "its parts stay stored until a lifecycle rule or an abort removes them"
                    ) from err
            raise
        return len(parts)

    def _upload_parts(
        self, key: str, upload_id: str, handle: BinaryIO, size: int, sha256: str, part_size: int
    ) -> list[tuple[int, str]]:
        start = handle.tell()
        whole = hashlib.sha256()
        parts: list[tuple[int, str]] = []
        for number, offset in enumerate(range(0, size, part_size), 1):
            length = min(part_size, size - offset)
            handle.seek(start + offset)
            digest, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
            left = length
            while left:
                chunk = handle.read(min(_HASH_CHUNK, left))
                if not chunk:
                    raise OSError(
                        f"S3 multipart upload of {key!r}: the file ended {left} B before part "
                        f"{number}'s end ({size} B expected): it changed while uploaded"
                    )
                digest.update(chunk)
                md5.update(chunk)
                whole.update(chunk)
                left -= len(chunk)
            handle.seek(start + offset)
            answer: dict[str, str] = {}
            self._call(
                "PUT",
                key,
                query={"partNumber": str(number), "uploadId": upload_id},
                body=_Part(handle, length),
                size=length,
                payload_sha256=digest.hexdigest(),
                headers_in={"content-md5": base64.b64encode(md5.digest()).decode()},
                headers_out=answer,
            )
            etag = answer.get("etag", "").strip('"')
            # S3 checks the signed sha256 and Content-MD5 itself; the ETag check also holds
            # against a store that does not (moto), and costs nothing.
            if not etag or (_etag_is_md5(answer) and etag != md5.hexdigest()):
                raise OSError(
                    f"S3 multipart upload of {key!r}: part {number} stored other bytes than "
                    f"were hashed (ETag {etag!r}, MD5 {md5.hexdigest()}): it changed while sent"
                )
            parts.append((number, etag))
        if whole.hexdigest() != sha256:
            raise OSError(
                f"S3 multipart upload of {key!r}: the file is no longer the content hashed "
                f"before (sha256 {whole.hexdigest()}, expected {sha256}): it changed meanwhile"
            )
        return parts

    def _complete(self, key: str, upload_id: str, parts: list[tuple[int, str]]) -> None:
        listed = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>&quot;{etag}&quot;</ETag></Part>"
            for n, etag in parts
        )
        doc = (
            f'<CompleteMultipartUpload xmlns="{_S3_NS[1:-1]}">{listed}</CompleteMultipartUpload>'
        ).encode()
        answer = self._call(
            "POST",
            key,
            query={"uploadId": upload_id},
            body=doc,
            payload_sha256=hashlib.sha256(doc).hexdigest(),
        )
        # "CompleteMultipartUpload" (Amazon S3 API Reference): the answer can be 200 OK with an
        # <Error> in its body, the request having failed after S3 began to answer.
        root = _xml("POST", key, answer or b"<Error/>")
        if root.tag.rsplit("}", 1)[-1] != "CompleteMultipartUploadResult":
            raise S3Error("POST", key, 200, answer or b"an empty answer")

    def delete(self, key: str) -> None:
        self._call("DELETE", key, ok_missing=True)

    def list(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix`` (ListObjectsV2, page by page)."""
        for found in self.objects(prefix):
            yield found.key

    def objects(self, prefix: str) -> Iterator[StoredObject]:
        """Every object under ``prefix`` with its size and time (ListObjectsV2, page by
        page): what the operator lists a store's checkpoint sets with."""
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            data = self._call("GET", "", query=query) or b""
            root = _xml("GET", prefix, data)
            ns = _S3_NS if root.tag.startswith(_S3_NS) else ""
            for item in root.iter(f"{ns}Contents"):
                key = item.findtext(f"{ns}Key")
                if key is not None:
                    size = item.findtext(f"{ns}Size") or "0"
                    yield StoredObject(
                        key, int(size) if size.isdigit() else 0, item.findtext(f"{ns}LastModified")
                    )
            token = root.findtext(f"{ns}NextContinuationToken") or ""
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return
