"""Validators for the PII rules (issue 16): phone numbers in national format, IP addresses.

A national number (no ``+CC``) only means something in a region, and Presidio's PhoneRecognizer
pays a full libphonenumber scan of the text per region. The rules instead find national shapes
with one regex and ask libphonenumber here, per candidate, whether any configured region holds
it as a valid number *written the way that region writes it* (its national format, trunk prefix
included), which keeps random digit runs of other shapes out. Results are cached: telemetry
repeats its numbers.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

import phonenumbers
from phonenumbers import NumberParseException, PhoneMetadata, PhoneNumberFormat

#: fewer digits is no national number of any configured region; more is no phone number at all
MIN_DIGITS = 7
MAX_DIGITS = 13


@lru_cache(maxsize=8192)
def valid_national_phone(value: str, regions: tuple[str, ...]) -> bool:
    """Is ``value`` a valid number of one of ``regions``, in that region's national form?

    "Valid" is libphonenumber's ``is_valid_number`` (the numbering plan's ranges and lengths);
    "national form" means the digits written are those of ``format_number(NATIONAL)``, so
    ``030 123456`` is a Berlin number but ``30 123456`` (no trunk prefix) is not.
    """
    digits = phonenumbers.normalize_digits_only(value)  # any script's digits, as ASCII
    if not MIN_DIGITS <= len(digits) <= MAX_DIGITS:
        return False
    for region in regions:
        if len(digits) not in _national_lengths(region):
            continue  # cheap: most candidates have no region's length
        try:
            number = phonenumbers.parse(value, region)
        except NumberParseException:
            continue
        if not phonenumbers.is_valid_number(number):
            continue
        national = phonenumbers.format_number(number, PhoneNumberFormat.NATIONAL)
        if "".join(c for c in national if c.isdigit()) == digits:
            return True
    return False


def load_regions(regions: tuple[str, ...]) -> None:
    """Load libphonenumber's metadata of ``regions`` now (lazily, the first value that needs a
    region pays ~10 ms for it), by checking each region's example number."""
    for region in regions:
        example = phonenumbers.example_number(region)
        if example is not None:
            national = phonenumbers.format_number(example, PhoneNumberFormat.NATIONAL)
            valid_national_phone(national, (region,))


@lru_cache(maxsize=512)
def _national_lengths(region: str) -> frozenset[int]:
    """Digit counts a national number of ``region`` can be written with (trunk prefix or not)."""
    meta = PhoneMetadata.metadata_for_region(region)
    if meta is None or meta.general_desc is None:
        return frozenset(range(MIN_DIGITS, MAX_DIGITS + 1))
    trunk = len(meta.national_prefix or "")
    lengths = set(meta.general_desc.possible_length or ())
    return frozenset(n + extra for n in lengths for extra in (0, trunk))


def valid_ip_address(value: str) -> bool:
    """An IPv4 or IPv6 address (an IPv6 zone id ``%eth0`` allowed), as ``ipaddress`` reads it."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
