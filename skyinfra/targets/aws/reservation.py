"""``aws.capacity_reservation_id``: the preflight of an On-Demand Capacity Reservation or a
Capacity Block the nodes launch into. The reservation fixes the zone (its own), so it is
checked before Terraform runs: its instance type, its zone against the spec's, its state, and
its free slots against the nodes still to launch.

DescribeCapacityReservations: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityReservations.html
Capacity Blocks launch with the ``capacity-block`` market type:
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from skyinfra.errors import PreflightError
from skyinfra.targets.aws.preflight import aws_errors
from skyinfra.targets.aws.session import AwsClients

CAPACITY_BLOCK = "capacity-block"


@dataclass(frozen=True)
class Reservation:
    id: str
    instance_type: str
    zone: str
    available: int
    total: int
    state: str
    capacity_block: bool

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Reservation:
        return cls(
            id=str(item["CapacityReservationId"]),
            instance_type=str(item.get("InstanceType", "")),
            zone=str(item.get("AvailabilityZone", "")),
            available=int(item.get("AvailableInstanceCount", 0)),
            total=int(item.get("TotalInstanceCount", 0)),
            state=str(item.get("State", "")),
            capacity_block=item.get("ReservationType") == CAPACITY_BLOCK,
        )


def check_reservation(
    reservation: Reservation,
    *,
    instance_type: str,
    needed: int,
    zones: Sequence[str] = (),
    subnet_zone: str | None = None,
) -> None:
    """PreflightError when ``needed`` more nodes of ``instance_type`` cannot launch into
    ``reservation``, or when it lies outside the zones the spec allows (pure)."""
    what = "Capacity Block" if reservation.capacity_block else "capacity reservation"
    where = f"{what} {reservation.id} (aws.capacity_reservation_id)"
    if reservation.instance_type != instance_type:
        raise PreflightError(
            f"{where} is for {reservation.instance_type}, not {instance_type} "
            "(aws.instance_type); use the reservation's type or another reservation"
        )
    if zones and reservation.zone not in zones:
        raise PreflightError(
            f"{where} is in {reservation.zone}, which aws.zones / --zones leaves out "
            f"({', '.join(zones)}); a reservation fixes the zone"
        )
    if subnet_zone is not None and subnet_zone != reservation.zone:
        raise PreflightError(
            f"{where} is in {reservation.zone} but aws.subnet_id is in {subnet_zone}; "
            "use a subnet in the reservation's zone"
        )
    if reservation.state != "active":
        later = (
            " (a Capacity Block can be used from its start time)"
            if reservation.state
            in (
                "scheduled",
                "payment-pending",
            )
            else ""
        )
        raise PreflightError(f"{where} is {reservation.state}, not active{later}")
    if needed > reservation.available:
        raise PreflightError(
            f"{where} has {reservation.available} free of {reservation.total} "
            f"{instance_type} in {reservation.zone}; {needed} node(s) would launch into it. "
            "Ask for fewer nodes, free slots, or extend the reservation"
        )


def describe_reservation(clients: AwsClients, reservation_id: str) -> Reservation:
    """The reservation as EC2 describes it; PreflightError when it does not exist."""
    with aws_errors(f"looking up capacity reservation {reservation_id}"):
        try:
            found = clients.client("ec2").describe_capacity_reservations(
                CapacityReservationIds=[reservation_id]
            )["CapacityReservations"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "InvalidCapacityReservationId.NotFound":
                raise
            found = []
    if not found:
        raise PreflightError(
            f"capacity reservation {reservation_id} (aws.capacity_reservation_id) does not exist "
            f"in {clients.region}; check the id and the region"
        )
    return Reservation.of(found[0])
