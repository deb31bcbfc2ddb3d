"""The runtime's S3 client against a real HTTP server on loopback that answers wrongly."""

from __future__ import annotations

import http.server
import threading

import pytest
from skyinfra_runtime import s3


def test_a_listing_that_is_not_xml_is_an_s3_error_naming_the_prefix() -> None:
    """A proxy's HTML page with HTTP 200 in place of ListObjectsV2's XML: the S3Error (an
    OSError, which restore's callers handle) with the answer, never xml's ParseError."""

    class NotXml(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>captive portal</body>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotXml)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        creds = s3.CredentialSource({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
        bucket = s3.Bucket(f"http://127.0.0.1:{server.server_port}/b", "us-east-1", creds)
        with pytest.raises(
            s3.S3Error, match="S3 GET 'run/nodes/': HTTP 200 <html><body>captive portal"
        ):
            list(bucket.list("run/nodes/"))
    finally:
        server.shutdown()
        server.server_close()
