"""The pure parts of the nodes' checkpoint store: s3:// URLs, SigV4 signing (AWS's own
examples), manifests, merging every node's manifest, which files have settled."""

from __future__ import annotations

import datetime
import json

import pytest
from skyinfra_runtime import ckptsync, s3
from skyinfra_runtime.ckptsync import Entry

# https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html (examples)
EXAMPLE = s3.Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
WHEN = datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("url", "signature"),
    [
        (
            "https://examplebucket.s3.amazonaws.com/?lifecycle=",
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
        ),
        (
            "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        ),
    ],
)
def test_sigv4_matches_the_aws_examples(url: str, signature: str) -> None:
    headers = s3.sign("GET", url, "us-east-1", EXAMPLE, s3.EMPTY_SHA256, WHEN)
    assert headers["authorization"].endswith(f"Signature={signature}")
    assert "SignedHeaders=host;x-amz-content-sha256;x-amz-date," in headers["authorization"]
    assert "host" not in headers  # the HTTP client sends it


def test_a_session_token_is_signed_too() -> None:
    creds = s3.Credentials("AKIA", "secret", "the-token")
    headers = s3.sign("GET", "https://b.s3.amazonaws.com/k", "eu-west-1", creds, "UNSIGNED", WHEN)
    assert headers["x-amz-security-token"] == "the-token"
    assert "x-amz-security-token" in headers["authorization"]
    assert "/eu-west-1/s3/aws4_request" in headers["authorization"]


def test_canonical_query_sorts_and_encodes() -> None:
    assert s3.canonical_query({"prefix": "a b/c", "list-type": "2"}) == (
        "list-type=2&prefix=a%20b%2Fc"
    )


@pytest.mark.parametrize(
    "url",
    ["s3://my-bucket/ckpts", "s3://team.data/a/b/c", "s3://abc/x_y-z.1"],
)
def test_good_checkpoint_urls(url: str) -> None:
    bucket, prefix = s3.parse_url(url)
    assert f"s3://{bucket}/{prefix}" == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://bucket/prefix", "s3://"),
        ("s3://bucket", "no prefix"),
        ("s3://bucket/", "no prefix"),
        ("s3://Bucket/p", "naming rules"),
        ("s3://ab/p", "naming rules"),
        ("s3://a..b/p", "naming rules"),
        ("s3://192.168.1.1/p", "naming rules"),
        ("s3://xn--abc/p", "reserved"),
        ("s3://bucket/a//b", "segment"),
        ("s3://bucket/a/../b", "segment"),
        ("s3://bucket/prefix/", "segment"),
        ("s3://bucket/pre fix", "segment"),
        ("s3://bucket/any*", "segment"),
    ],
)
def test_bad_checkpoint_urls_say_why_and_what_is_valid(url: str, why: str) -> None:
    problem = s3.url_problem(url)
    assert problem is not None and why in problem
    with pytest.raises(ValueError, match="expected s3://BUCKET/PREFIX"):
        s3.parse_url(url)


def test_manifest_round_trip_and_unsafe_paths() -> None:
    files = {"step_1/a.bin": Entry("ab" * 32, 3, 5)}
    assert ckptsync.parse_manifest(ckptsync.manifest_bytes(0, files)) == files
    for rel in ("../escape", "/abs", "a//b", "a/./b", ""):
        doc = {"schema": 1, "node": 0, "files": {rel: {"sha256": "x", "size": 1, "mtime_ns": 1}}}
        with pytest.raises(ValueError, match="bad path"):
            ckptsync.parse_manifest(json.dumps(doc).encode())
    with pytest.raises(ValueError, match="schema"):
        ckptsync.parse_manifest(b'{"schema": 99}')


def test_merge_takes_the_newest_then_the_lowest_node() -> None:
    merged = ckptsync.merge(
        {
            1: {"shared": Entry("b", 1, 20), "one": Entry("c", 1, 1), "tie": Entry("t1", 1, 5)},
            0: {"shared": Entry("a", 1, 10), "tie": Entry("t0", 1, 5)},
        }
    )
    assert merged == {
        "shared": (1, Entry("b", 1, 20)),
        "one": (1, Entry("c", 1, 1)),
        "tie": (0, Entry("t0", 1, 5)),
    }


def test_a_file_counts_as_settled_when_two_polls_agree() -> None:
    before = {"a": (1, 10), "b": (2, 20)}
    now = {"a": (1, 10), "b": (3, 30), "c": (1, 1)}
    assert ckptsync.stable(before, now) == {"a"}


def test_part_sizes_keep_any_object_up_to_5_tib_within_10000_parts() -> None:
    assert s3.part_size_for(1) == s3.PART_SIZE
    assert s3.part_size_for(100 * 1024**3) == s3.PART_SIZE  # 1,600 parts of 64 MiB
    for size in (s3.PART_SIZE * s3.MAX_PARTS + 1, s3.MAX_OBJECT_SIZE):
        part = s3.part_size_for(size)
        assert part % s3.MiB == 0 and s3.MIN_PART_SIZE <= part <= s3.MAX_PART_SIZE
        assert -(-size // part) <= s3.MAX_PARTS
    assert s3.part_size_for(s3.MAX_OBJECT_SIZE) == 525 * s3.MiB
    with pytest.raises(ValueError, match=r"5497558138881 B is over S3's limit .* \(5 TiB\)"):
        s3.part_size_for(s3.MAX_OBJECT_SIZE + 1)


def test_multipart_settings_name_the_bad_value_and_what_is_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3.Bucket("http://127.0.0.1:9/b", "us-east-1", multipart_threshold=10, part_size=None)
    assert (bucket.multipart_threshold, bucket.part_size) == (10, s3.PART_SIZE)
    with pytest.raises(ValueError, match=r"part_size: 1024 is not a number of bytes from 5242880"):
        s3.Bucket("http://127.0.0.1:9/b", "us-east-1", part_size=1024)
    with pytest.raises(ValueError, match=r"multipart_threshold: 6442450944 is not .* 5368709120"):
        s3.Bucket("http://127.0.0.1:9/b", "us-east-1", multipart_threshold=6 * 1024**3)
    monkeypatch.setenv(s3.PART_SIZE_ENV, "5M")
    with pytest.raises(ValueError, match=r"SKYINFRA_S3_PART_SIZE: '5M' is not a number of bytes"):
        s3.Bucket("http://127.0.0.1:9/b", "us-east-1")
    monkeypatch.setenv(s3.PART_SIZE_ENV, str(8 * s3.MiB))
    monkeypatch.setenv(s3.THRESHOLD_ENV, str(9 * s3.MiB))
    bucket = s3.Bucket("http://127.0.0.1:9/b", "us-east-1")
    assert (bucket.multipart_threshold, bucket.part_size) == (9 * s3.MiB, 8 * s3.MiB)


def test_answers_that_are_not_xml_are_s3_errors_and_leading_spaces_are_kept_out() -> None:
    # S3 sends spaces while it completes a multipart upload, then the XML declaration.
    answer = b"   \n  <?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult/>"
    assert s3._xml("POST", "k", answer).tag == "CompleteMultipartUploadResult"
    with pytest.raises(s3.S3Error, match=r"S3 POST 'k': HTTP 200 not xml"):
        s3._xml("POST", "k", b"not xml")
