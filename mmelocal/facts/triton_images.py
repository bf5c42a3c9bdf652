"""SageMaker's Triton Inference Server images: which ECR account serves which release in
which region, the default release, and the image names (the one table; the Docker
launcher's :func:`~mmelocal.runtime.docker_engine.sagemaker_triton_image` and the deployer's
:func:`~mmelocal.deploy.images.triton_image_uri` both read it).

The account depends on the release (deep-learning-containers ``available_images.md``,
"NVIDIA Triton Inference Containers (SM support only)", the list SageMaker's Triton page
points to; sagemaker-python-sdk pull request 4432):

- **23.12 and later**: the Deep Learning Containers accounts (763104351884 in most
  regions). Releases and regions are the ``registries`` of sagemaker-python-sdk's
  ``image_uri_config/sagemaker-tritonserver.json`` (``sagemaker-core`` since SDK v3):
  23.12 to 24.09 in 26 regions with China; 25.04 in 35; 25.09 and 26.05 in 34, without
  China.
- **before 23.12** (21.08, 22.05 to 23.10): the per-region accounts of the AWS Triton
  notebooks' ``account_id_map`` (amazon-sagemaker-examples, e.g.
  ``sm-triton_mme_bert_trt.ipynb``; 785573368785 in us-east-1), in its 22 regions; the
  releases are those ``available_images.md`` lists for "Versions prior to 23.12".

A release or region missing here is refused (the service would not find the image): name
the image yourself instead. Releases listed by only one source (26.03 in the DLC docs'
data, not in the SDK) are left out until a source gives their regions.

The default release: the pip wheel's tritonserver (nvidia-pytriton) is Triton 2.51, NGC
release 24.10, which is what mmelocal's entrypoint and routes follow. SageMaker never
published a 24.10 image; 24.09 (Triton 2.50) is the newest at or before it, and its
SageMaker front end (``docker/sagemaker/serve``, ``src/sagemaker_server.cc`` in
triton-inference-server/server) is unchanged from r24.09 to r24.10.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mmelocal.errors import UserInputError

#: the ECR repository of SageMaker's Triton images
REPOSITORY = "sagemaker-tritonserver"
#: a SageMaker Triton image's name (``{domain}``: ``amazonaws.com``, ``.com.cn`` in China)
SAGEMAKER_IMAGE = "{account}.dkr.ecr.{region}.{domain}/" + REPOSITORY + ":{release}-py3"
#: NVIDIA's Triton image, which SageMaker's is built from (``{release}``: ``yy.mm``)
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:{release}-py3"
#: the Triton version of the pip wheel's tritonserver (nvidia-pytriton 0.7)
WHEEL_TRITON_VERSION = "2.51"
#: the NGC release that ships Triton 2.51
WHEEL_NGC_RELEASE = "24.10"
#: the SageMaker release mmelocal deploys and names by default (see the module doc)
DEFAULT_SAGEMAKER_RELEASE = "24.09"

#: the Deep Learning Containers accounts, region -> account (sagemaker-tritonserver.json;
#: deep-learning-containers ``docs/reference/region_availability.md``)
DLC_ACCOUNTS: Mapping[str, str] = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-south-2": "772153158452",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-central-2": "380420809688",
    "eu-north-1": "763104351884",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
    "sa-east-1": "763104351884",
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
}

#: the accounts of the releases before 23.12, region -> account (the notebooks'
#: ``account_id_map``)
EARLY_ACCOUNTS: Mapping[str, str] = {
    "us-east-1": "785573368785",
    "us-east-2": "007439368137",
    "us-west-1": "710691900526",
    "us-west-2": "301217895009",
    "eu-west-1": "802834080501",
    "eu-west-2": "205493899709",
    "eu-west-3": "254080097072",
    "eu-north-1": "601324751636",
    "eu-south-1": "966458181534",
    "eu-central-1": "746233611703",
    "ap-east-1": "110948597952",
    "ap-south-1": "763008648453",
    "ap-northeast-1": "941853720454",
    "ap-northeast-2": "151534178276",
    "ap-southeast-1": "324986816169",
    "ap-southeast-2": "355873309152",
    "cn-northwest-1": "474822919863",
    "cn-north-1": "472730292857",
    "sa-east-1": "756306329178",
    "ca-central-1": "464438896020",
    "me-south-1": "836785723513",
    "af-south-1": "774647643957",
}

_NEW_REGIONS_2025 = frozenset(
    {
        "ap-east-2",
        "ap-south-2",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-6",
        "ap-southeast-7",
        "eu-central-2",
        "eu-south-2",
        "me-central-1",
        "mx-central-1",
    }
)
_CHINA = frozenset({"cn-north-1", "cn-northwest-1"})


@dataclass(frozen=True, kw_only=True)
class Releases:
    """Releases published from one set of accounts in the same regions."""

    #: the releases (image tags without ``-py3``), oldest first
    releases: tuple[str, ...]
    #: region -> the account that serves them there (only the regions they are in)
    accounts: Mapping[str, str]
    #: where this row comes from
    source: str


_SDK = "sagemaker-python-sdk image_uri_config/sagemaker-tritonserver.json"

#: every release SageMaker's Triton image is known to have, by account and regions
RELEASES: tuple[Releases, ...] = (
    Releases(
        releases=(
            "21.08",
            *("22.05", "22.07", "22.08", "22.09", "22.10", "22.12"),
            *("23.01", "23.02", "23.03", "23.05", "23.06", "23.07", "23.08", "23.09", "23.10"),
        ),
        accounts=EARLY_ACCOUNTS,
        source="deep-learning-containers available_images.md (versions prior to 23.12) and "
        "the account_id_map of amazon-sagemaker-examples' Triton notebooks",
    ),
    Releases(
        releases=("23.12", "24.01", "24.03", "24.05", "24.09"),
        accounts={r: a for r, a in DLC_ACCOUNTS.items() if r not in _NEW_REGIONS_2025},
        source=_SDK,
    ),
    Releases(
        releases=("25.04",),
        accounts={r: a for r, a in DLC_ACCOUNTS.items() if r != "ap-southeast-6"},
        source=_SDK,
    ),
    Releases(
        releases=("25.09", "26.05"),
        accounts={r: a for r, a in DLC_ACCOUNTS.items() if r not in _CHINA},
        source=_SDK,
    ),
)


def releases() -> tuple[str, ...]:
    """Every known release, oldest first."""
    return tuple(v for row in RELEASES for v in row.releases)


def regions() -> tuple[str, ...]:
    """Every region some release is published in, sorted."""
    return tuple(sorted({r for row in RELEASES for r in row.accounts}))


def _in_region(region: str) -> list[tuple[str, str]]:
    """(release, account) of every release published in ``region``, oldest first."""
    return [
        (v, row.accounts[region])
        for row in RELEASES
        if region in row.accounts
        for v in row.releases
    ]


def _listing(found: list[tuple[str, str]]) -> str:
    """``21.08, 22.05 from account A; 23.12 from account B``: releases grouped by account."""
    groups: list[tuple[str, list[str]]] = []
    for release, account in found:
        if groups and groups[-1][0] == account:
            groups[-1][1].append(release)
        else:
            groups.append((account, [release]))
    return "; ".join(f"{', '.join(vs)} from account {a}" for a, vs in groups)


def sagemaker_image_uri(region: str, release: str = DEFAULT_SAGEMAKER_RELEASE) -> str:
    """SageMaker's Triton image for ``region`` and ``release`` (e.g. ``763104351884.dkr.ecr.
    us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3``).

    Raises :class:`UserInputError` for a region or a release the table does not have there,
    naming what it has; callers add how to name the image instead.
    """
    found = _in_region(region)
    if not found:
        raise UserInputError(
            f"no SageMaker Triton image known for region {region!r}: no release of "
            f"{REPOSITORY} in the image table is published there (regions: "
            f"{', '.join(regions())})"
        )
    account = dict(found).get(release)
    if account is None:
        raise UserInputError(
            f"no SageMaker Triton image known for release {release!r} in {region}: it is "
            f"not in the image table there (published there: {_listing(found)})"
        )
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return SAGEMAKER_IMAGE.format(account=account, region=region, domain=domain, release=release)


def ngc_image(release: str = WHEEL_NGC_RELEASE) -> str:
    """NVIDIA's Triton image of ``release`` (default: the one that ships the wheel's Triton)."""
    return NGC_IMAGE.format(release=release)


__all__ = [
    "DEFAULT_SAGEMAKER_RELEASE",
    "DLC_ACCOUNTS",
    "EARLY_ACCOUNTS",
    "NGC_IMAGE",
    "RELEASES",
    "REPOSITORY",
    "SAGEMAKER_IMAGE",
    "WHEEL_NGC_RELEASE",
    "WHEEL_TRITON_VERSION",
    "Releases",
    "ngc_image",
    "regions",
    "releases",
    "sagemaker_image_uri",
]
