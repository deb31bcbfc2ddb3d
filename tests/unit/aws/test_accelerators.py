"""accelerators.py: the built-in table of GPU instance types agrees with moto's copy of EC2's
DescribeInstanceTypes answer, and ``aws.accelerators`` parses and resolves against it."""

from __future__ import annotations

import gzip
import json
from importlib import resources

import pytest

from skyinfra.errors import SpecError
from skyinfra.targets.aws.accelerators import (
    AWS_REGIONS,
    GPU_TYPES,
    Accelerators,
    check_region,
    check_regions,
    gpu_type,
    parse_accelerators,
    types_carrying,
)


def _moto(path: str) -> object:
    data = resources.files("moto.ec2").joinpath("resources", path)
    return json.loads(gzip.decompress(data.read_bytes()))


def test_table_equals_moto_describe_instance_types() -> None:
    described = _moto("instance_types.json.gz")
    assert isinstance(described, dict)
    from_moto = {}
    for name, info in described.items():
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
        if not gpus or gpus[0]["Count"] < 1:
            continue  # no GPU, or a fraction of one (g6f)
        (gpu,) = gpus
        from_moto[name] = (
            gpu["Name"],
            gpu["Count"],
            gpu["MemoryInfo"]["SizeInMiB"],
            bool(info["NetworkInfo"].get("EfaSupported")),
            info["VCpuInfo"]["DefaultVCpus"],
        )
    ours = {
        r.instance_type: (r.gpu_name, r.gpu_count, r.gpu_memory_mib, r.efa, r.vcpus)
        for r in GPU_TYPES
    }
    assert ours == from_moto


def test_every_region_moto_offers_types_in_is_known() -> None:
    folder = resources.files("moto.ec2").joinpath("resources", "instance_type_offerings", "region")
    moto_regions = {p.name.removesuffix(".json.gz") for p in folder.iterdir()}
    assert moto_regions <= set(AWS_REGIONS)


@pytest.mark.parametrize(
    ("text", "parsed", "types"),
    [
        ("H100:8", Accelerators("H100", 8), ("p5.48xlarge",)),
        ("h100:1", Accelerators("H100", 1), ("p5.4xlarge",)),
        ("A100:8", Accelerators("A100", 8), ("p4d.24xlarge", "p4de.24xlarge")),
        (
            "L4:1",
            Accelerators("L4", 1),
            (
                "g6.xlarge",
                "g6.2xlarge",
                "g6.4xlarge",
                "gr6.4xlarge",
                "g6.8xlarge",
                "gr6.8xlarge",
                "g6.16xlarge",
            ),
        ),
        ("A10G:4", Accelerators("A10G", 4), ("g5.12xlarge", "g5.24xlarge")),
        ("H200:8", Accelerators("H200", 8), ("p5e.48xlarge", "p5en.48xlarge")),
        (" L40S : 4 ", Accelerators("L40S", 4), ("g6e.12xlarge", "g6e.24xlarge")),
    ],
)
def test_accelerators_resolve_to_the_types_carrying_exactly_them(
    text: str, parsed: Accelerators, types: tuple[str, ...]
) -> None:
    assert parse_accelerators(text) == parsed
    assert types_carrying(parsed) == types


def test_min_gpu_memory_narrows_the_types() -> None:
    a100 = Accelerators("A100", 8)
    assert types_carrying(a100, 80) == ("p4de.24xlarge",)
    assert types_carrying(a100, 40) == ("p4d.24xlarge", "p4de.24xlarge")
    assert types_carrying(a100, 81) == ()


def test_gpu_memory_is_per_gpu_in_gib() -> None:
    row = gpu_type("p5.48xlarge")
    assert row is not None and (row.gpu_memory_gib, row.efa) == (80, True)
    assert gpu_type("t3.micro") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("H100:3", '"H100:1", "H100:8"'),  # no type has 3
        ("X900:8", "A100, A10G, B200"),  # unknown name: the known ones listed
        ("H100", "GPU name and count per node"),
        ("H100:0", '"H100:1", "H100:8"'),
        (8, "GPU name and count per node"),
    ],
)
def test_bad_accelerators_name_the_field_and_what_would_do(value: object, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_accelerators(value)
    assert err.value.field == "aws.accelerators"
    assert expected in str(err.value)


def test_regions_are_checked_against_the_table() -> None:
    assert check_regions(["us-east-1", "us-west-2"]) == ("us-east-1", "us-west-2")
    with pytest.raises(SpecError) as err:
        check_regions(["us-east-1", "us-east-7"])
    assert err.value.field == "aws.regions[1]"
    assert "us-east-1, us-east-2, us-gov-east-1" in str(err.value)
    for bad in ([], "us-east-1", None):
        with pytest.raises(SpecError, match="non-empty list of AWS regions"):
            check_regions(bad)
    with pytest.raises(SpecError, match="listed twice"):
        check_regions(["us-east-1", "us-east-1"])
    with pytest.raises(SpecError) as one:
        check_region("mars-north-1", "aws.region")
    assert one.value.field == "aws.region"
