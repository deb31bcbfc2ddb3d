"""The login user of an AMI: the spec's ``aws.ssh_user``, else guessed from the image's name.

AWS lists each distribution's default user in "Manage system users":
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/managing-users.html
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from skyinfra.errors import PreflightError
from skyinfra.targets.aws.network_spec import BASTION_DEFAULT_USER
from skyinfra.targets.aws.preflight import aws_errors
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.aws.spec import AwsSpec

# The user when the AMI cannot be looked up and the checks are skipped (the Deep Learning AMI's).
FALLBACK_USER = "ubuntu"

# The default login user of an AMI, from words in its name or description (first match wins:
# "Deep Learning AMI Ubuntu" is an Ubuntu image).
_LOGIN_USERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"ubuntu|canonical"), "ubuntu"),
    (re.compile(r"debian"), "admin"),
    (re.compile(r"amzn|amazon linux|al2023|amazon-eks|eks-node"), "ec2-user"),
    (re.compile(r"rhel|red hat|suse|sles"), "ec2-user"),
    (re.compile(r"rocky"), "rocky"),
    (re.compile(r"centos"), "centos"),
    (re.compile(r"fedora"), "fedora"),
)


def login_user(image: Mapping[str, Any]) -> str | None:
    """The default SSH user of an AMI from DescribeImages, or None when it cannot tell."""
    text = f"{image.get('Name', '')} {image.get('Description', '')}".lower()
    for pattern, user in _LOGIN_USERS:
        if pattern.search(text):
            return user
    return None


def _describe_image(clients: AwsClients, ami_id: str) -> Mapping[str, Any] | None:
    """The AMI's DescribeImages entry, or None when this region has no such image."""
    with aws_errors(f"looking up AMI {ami_id}"):
        try:
            images = clients.client("ec2").describe_images(ImageIds=[ami_id])["Images"]
        except ClientError as err:
            if not str(err.response.get("Error", {}).get("Code", "")).startswith("InvalidAMIID"):
                raise
            images = []
    return images[0] if images else None


def check_image_architecture(
    clients: AwsClients, ami_id: str, architectures: tuple[str, ...], instance_type: str
) -> None:
    """PreflightError when the AMI is built for an architecture the instance type does not
    run (an x86_64 image on g5g): RunInstances would refuse it only after Terraform began."""
    image = _describe_image(clients, ami_id)
    if image is None or not architectures:
        return  # a missing image is the login-user lookup's to report
    arch = str(image.get("Architecture", ""))
    if arch and arch not in architectures:
        raise PreflightError(
            f"AMI {ami_id} ({image.get('Name')!r}) is built for {arch}, but {instance_type} "
            f"runs {', '.join(architectures)}. Set aws.ami to an image of that architecture, "
            "or leave it out for the Deep Learning AMI of the right one."
        )


def resolve_login_user(
    clients: AwsClients,
    spec_aws: AwsSpec,
    ami_id: str,
    *,
    warn: Callable[[str], None],
    strict: bool,
) -> str:
    """``aws.ssh_user``, else the AMI's default user. A missing AMI is a PreflightError when
    ``strict`` (the preflight runs), else a warning and :data:`FALLBACK_USER`."""
    if spec_aws.ssh_user is not None:
        return spec_aws.ssh_user
    image = _describe_image(clients, ami_id)
    if image is None:
        if strict:
            raise PreflightError(
                f"AMI {ami_id} does not exist in {spec_aws.region} (or is not shared with this "
                "account). Set aws.ami to an AMI of this region, or leave it out for the Deep "
                "Learning AMI."
            )
        warn(
            f"AMI {ami_id} not found; logging in as {FALLBACK_USER!r} "
            "(set aws.ssh_user to change it)"
        )
        return FALLBACK_USER
    return _image_user(image, ami_id, "aws.ami", "aws.ssh_user (ubuntu, ec2-user, admin, ...)")


def resolve_bastion_user(
    clients: AwsClients, ami_id: str, *, warn: Callable[[str], None], strict: bool
) -> str:
    """The login user of ``aws.bastion_ami`` (the bastion's own image), which the operator's
    first hop logs in as. A missing AMI is a PreflightError when ``strict``, else a warning
    and Amazon Linux's ``ec2-user`` (the bastion's default image's)."""
    image = _describe_image(clients, ami_id)
    if image is None:
        if strict:
            raise PreflightError(
                f"AMI {ami_id} (aws.bastion_ami) does not exist in this region (or is not "
                "shared with this account). Set aws.bastion_ami to an AMI of this region, or "
                "leave it out for Amazon Linux 2023 minimal."
            )
        warn(f"AMI {ami_id} (aws.bastion_ami) not found; the bastion's login taken as ec2-user")
        return BASTION_DEFAULT_USER
    return _image_user(
        image,
        ami_id,
        "aws.bastion_ami",
        "aws.bastion_ami to an image of Amazon Linux, Ubuntu, Debian, RHEL, ... or leave it out",
    )


def _image_user(image: Mapping[str, Any], ami_id: str, field: str, remedy: str) -> str:
    if str(image.get("Platform", "")).lower() == "windows":
        raise PreflightError(
            f"AMI {ami_id} ({image.get('Name')}, {field}) is a Windows image; skyinfra's hosts "
            "run Linux (cloud-init, OpenSSH). Pick a Linux AMI or leave it out."
        )
    user = login_user(image)
    if user is None:
        raise PreflightError(
            f"cannot tell the login user of AMI {ami_id} ({image.get('Name')!r}, {field}); "
            f"set {remedy}"
        )
    return user
