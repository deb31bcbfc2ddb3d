"""The target's boto3 sessions (targets/aws/session.py): each is a session of its own, and all of
them read botocore's service models through one loader, so a CLI call that makes several
sessions (the ladder's lookups, the render, the preflight) decodes the EC2 model once."""

from __future__ import annotations

from skyinfra.targets.aws.session import new_session


def test_new_sessions_are_their_own_but_decode_the_ec2_model_once() -> None:
    first, second = new_session(), new_session()
    assert first is not second
    assert first._session is not second._session  # credentials and clients of its own
    loader = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is loader
    paths = list(loader.search_paths)
    model = loader.load_service_model("ec2", "service-2")
    assert new_session()._session.get_component("data_loader") is loader
    assert loader.load_service_model("ec2", "service-2") is model  # cached, not decoded again
    assert loader.search_paths == paths  # boto3's data folder is not added again per session
    assert len(set(paths)) == len(paths)
