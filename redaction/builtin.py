"""Presidio's five built-in recognizers that the rules name (``presidio:`` in rules.yaml), without
Presidio: what the light engine (node agent, OTel exporter) runs in their place.

Why our own: presidio-analyzer pulls spaCy (the agent's install would grow from ~50 to ~420 MB),
and the light mode needs none of its NLP. The facts below are Presidio's (presidio-analyzer
2.2.366, MIT licence; microsoft/presidio ``predefined_recognizers/generic``): the patterns and
scores, ``PatternRecognizer``'s regex flags (DOTALL, MULTILINE, IGNORECASE) and scoring
(a validator's yes sets 1.0 and its no 0; an invalidator's yes sets 0; a score of 0 is dropped),
``EmailRecognizer``'s tldextract check, ``IpRecognizer``'s ``ipaddress.ip_interface`` check,
``CreditCardRecognizer``'s Luhn check after removing ``-`` and spaces, ``UrlRecognizer``'s
patterns and ``PhoneRecognizer`` (libphonenumber's ``PhoneNumberMatcher`` per region, score 0.4).
``tests/test_redaction_light.py`` holds them to Presidio's output on every corpus text.

Context words: Presidio raises a score for a context word among the NLP tokens; with no NLP
engine (the stream's default and the light mode's only setting) there are no tokens, so none.
A regex timeout raises (fail closed) where Presidio skips the pattern after 60 s; the stream's
field budget (1 s) fails that value closed too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import phonenumbers
import regex

from rankscope.redaction.matching import Match, luhn, remove_duplicates
from rankscope.redaction.rules import RecognizerSpec

__all__ = ["BuiltinRecognizer", "builtin_recognizer"]

#: PatternRecognizer's default flags
_FLAGS = regex.DOTALL | regex.MULTILINE | regex.IGNORECASE

_EMAIL = [
    (
        "Email (Medium)",
        "\\b((([!#$%&'*+\\-/=?^_`{|}~\\w])|([!#$%&'*+\\-/=?^_`{|}~\\w][!#$%&'*+\\-/=?^_`{|}~\\.\\w]{0,}[!#$%&'*+\\-/=?^_`{|}~\\w]))[@]\\w+(?:-+\\w+)*(?:\\.\\w+(?:-+\\w+)*)+)\\b",
        0.5,
    ),
]
_IP = [
    (
        "IPv4_mapped",
        "(?<![\\w:])::(?:ffff(?::0{1,4})?:)?(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)(?:/(?:12[0-8]|1[01]\\d|[1-9]?\\d))?\\b",
        0.6,
    ),
    (
        "IPv4_embedded",
        "(?<![\\w:])(?:(?:[0-9A-Fa-f]{1,4}:){1,5}:(?:[0-9A-Fa-f]{1,4}:){0,4}|(?:[0-9A-Fa-f]{1,4}:){6})(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)(?:/(?:12[0-8]|1[01]\\d|[1-9]?\\d))?\\b",
        0.6,
    ),
    (
        "IPv4",
        "\\b(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)(?:/(?:[0-2]?\\d|3[0-2]))?\\b",
        0.6,
    ),
    (
        "IPv6",
        "(?<![\\w:])(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}:){1,7}:|:(?::[0-9A-Fa-f]{1,4}){1,7}|(?:[0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}:){1,5}(?::[0-9A-Fa-f]{1,4}){1,2}|(?:[0-9A-Fa-f]{1,4}:){1,4}(?::[0-9A-Fa-f]{1,4}){1,3}|(?:[0-9A-Fa-f]{1,4}:){1,3}(?::[0-9A-Fa-f]{1,4}){1,4}|(?:[0-9A-Fa-f]{1,4}:){1,2}(?::[0-9A-Fa-f]{1,4}){1,5}|[0-9A-Fa-f]{1,4}:(?::[0-9A-Fa-f]{1,4}){1,6}|:(?::[0-9A-Fa-f]{1,4}){1,6})(?:%[0-9a-zA-Z]+)?(?:/(?:12[0-8]|1[01]\\d|[1-9]?\\d))?(?![\\w:]|\\.\\d)",
        0.6,
    ),
    ("IPv6_unspecified", "(?<![\\w:])::(?:/(?:12[0-8]|1[01]\\d|[1-9]?\\d))?(?![\\w:])", 0.1),
]
_CREDIT_CARD = [
    (
        "All Credit Cards (weak)",
        "\\b(?!1\\d{12}(?!\\d))((4\\d{3})|(5[0-5]\\d{2})|(6\\d{3})|(1\\d{3})|(3\\d{3}))[- ]?(\\d{3,4})[- ]?(\\d{3,4})[- ]?(\\d{3,5})\\b",  # noqa: E501
        0.3,
    ),
]
#: UrlRecognizer.BASE_URL_REGEX: a host ending in one of these top-level domains, then a path
_URL_TLDS = """
    com edu gov int mil net onl org pro red tel uno xxx academy accountant accountants actor
    adult africa agency airforce apartments app archi army art asia associates attorney auction
    audio auto autos baby band bar bargains beer berlin best bet bid bike bio black blackfriday
    blog blue boats bond boo boston bot boutique build builders business buzz cab cafe cam
    camera camp capital car cards care careers cars casa cash casino catering center ceo cfd
    charity chat cheap christmas church city claims cleaning click clinic clothing cloud club
    codes coffee college com community company computer condos construction consulting contact
    contractors cooking cool coupons courses credit creditcard cricket cruises cyou dad dance
    date dating day degree delivery democrat dental dentist desi design dev diamonds diet
    digital direct directory discount doctor dog domains download earth eco education email
    energy engineer engineering enterprises equipment esq estate events exchange expert exposed
    express fail faith family fans farm fashion feedback film finance financial fish fishing fit
    fitness flights florist flowers football forsale foundation fun fund furniture futbol fyi
    gallery game games garden gay gdn gifts gives giving glass global gmbh gold golf graphics
    gratis green gripe group guide guitars guru hair hamburg haus health healthcare help hiphop
    hockey holdings holiday homes horse hospital host hosting house how icu info ink institute
    insure international investments irish jewelry jetzt juegos kaufen kids kitchen kiwi krd
    kyoto land lat law lawyer lease legal lgbt life lighting limited limo link live loan loans
    lol london love ltd ltda luxury maison management market marketing markets mba media
    melbourne meme memorial men miami mobi moda moe mom money monster mortgage motorcycles mov
    movie nagoya name navy network new news ngo ninja now nyc observer okinawa one ong onl
    online organic osaka page paris partners parts party pet phd photo photography photos pics
    pictures pink pizza place plumbing plus poker porn press pro productions prof promo
    properties property protection pub quest racing recipes red rehab reise reisen rent rentals
    repair report republican rest restaurant review reviews rip rocks rodeo rsvp run saarland
    sale salon sarl sbs school schule science services sex sexy sh shoes shop shopping show
    singles site skin soccer social software solar solutions soy space spiegel study style sucks
    supply support surf surgery systems tax taxi team tech technology tel theater tips tires
    today tools top tours town toys trade training tube uk university uno vacations ventures vet
    video villas vin vip vision vlaanderen vodka vote voting voyage wales wang watch webcam
    website wedding wiki wine work works world wtf xyz yoga yokohama you zone ac ad ae af ag ai
    al am an ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bm bn bo br bs bt bv bw by bz
    ca cc cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj dk dm do dz ec ee eg er es et
    eu fi fj fk fm fo fr ga gb gd ge gf gg gh gi gl gm gn gp gq gr gs gt gu gw gy hk hm hn hr ht
    hu id ie il im in io iq ir is it je jm jo jp ke kg kh ki km kn kp kr kw ky kz la lb lc li lk
    lr ls lt lu lv ly ma mc md me mg mh mk ml mm mn mo mp mq mr ms mt mu mv mw mx my mz na nc ne
    nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm pn pr ps pt pw py qa re ro rs ru rw sa
    sb sc sd se sg sh si sj sk sl sm sn so sr st su sv sx sy sz tc td tf tg th tj tk tl tm tn to
    tp tr tt tv tw tz ua ug uk us uy uz va vc ve vg vi vn vu wf ws ye yt za zm zw
""".split()  # noqa: SIM905
_BASE_URL = (
    "((www\\d{0,3}[.])?[a-z0-9.\\-]{1,253}[.]"
    + "(?:"
    + "|".join(f"(?:{t})" for t in _URL_TLDS)
    + ")"
    + "(?:/[^\\s()<>\\\"']*)?)"
)
_URL = [
    ("Standard Url", "(?i)(?:https?://)" + _BASE_URL, 0.6),
    ("Non schema URL", "(?i)" + _BASE_URL, 0.5),
    ("Quoted URL", r'(?i)["\'](https?://' + _BASE_URL + r')["\']', 0.6),
    ("Quoted Non-schema URL", r'(?i)["\'](' + _BASE_URL + r')["\']', 0.5),
]


def _email_ok(value: str) -> bool | None:
    import tldextract  # (loaded offline: core.offline_tldextract)

    return tldextract.extract(value).fqdn != ""


def _ip_invalid(value: str) -> bool | None:
    try:
        ipaddress.ip_interface(value)
    except ValueError:
        return True
    return None


def _card_ok(value: str) -> bool | None:
    return luhn(value.replace("-", "").replace(" ", ""))


class BuiltinRecognizer:
    """A Presidio pattern recognizer's behaviour: patterns, then validate / invalidate."""

    def __init__(
        self,
        spec: RecognizerSpec,
        patterns: list[tuple[str, str, float]],
        timeout_s: float,
        validate: Callable[[str], bool | None] | None = None,
        invalidate: Callable[[str], bool | None] | None = None,
    ) -> None:
        self.name = spec.name
        self.entity = spec.entity
        self.timeout_s = timeout_s
        self._validate = validate
        self._invalidate = invalidate
        self._patterns = [(name, regex.compile(rx, _FLAGS), score) for name, rx, score in patterns]

    def match(self, text: str) -> list[Match]:
        results: list[Match] = []
        for name, rx, score in self._patterns:
            for m in rx.finditer(text, timeout=self.timeout_s):
                start, end = m.span()
                if start == end:
                    continue
                value = text[start:end]
                got = score
                valid = self._validate(value) if self._validate else None
                if valid is not None:
                    got = 1.0 if valid else 0.0
                if self._invalidate is not None and self._invalidate(value):
                    got = 0.0
                if got > 0:
                    results.append(Match(self.entity, start, end, got, self.name, False, name))
        return remove_duplicates(results)


class PhoneBuiltin:
    """Presidio's PhoneRecognizer: libphonenumber's matcher once per region, score 0.4."""

    SCORE = 0.4

    def __init__(self, spec: RecognizerSpec, regions: list[str], leniency: int = 1) -> None:
        self.name = spec.name
        self.entity = spec.entity
        self.regions = ["GB" if r == "UK" else r for r in regions]  # people say UK
        self.leniency = leniency

    def match(self, text: str) -> list[Match]:
        results = [
            Match(self.entity, m.start, m.end, self.SCORE, self.name)
            for region in self.regions
            for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=self.leniency)
        ]
        return remove_duplicates(results)


#: Presidio's PhoneRecognizer.DEFAULT_SUPPORTED_REGIONS
_PHONE_REGIONS = ["US", "GB", "DE", "FR", "IL", "IN", "CA", "BR"]

_PATTERN_BUILTINS: dict[
    str,
    tuple[
        list[tuple[str, str, float]],
        Callable[[str], bool | None] | None,
        Callable[[str], bool | None] | None,
    ],
] = {
    "EmailRecognizer": (_EMAIL, _email_ok, None),
    "IpRecognizer": (_IP, None, _ip_invalid),
    "CreditCardRecognizer": (_CREDIT_CARD, _card_ok, None),
    "UrlRecognizer": (_URL, None, None),
}


def builtin_recognizer(spec: RecognizerSpec, timeout_s: float) -> BuiltinRecognizer | PhoneBuiltin:
    """The recognizer a rule's ``presidio:`` names, with its ``presidio_args`` and
    ``presidio_patterns``; an unknown name or argument is an error at start."""
    args: dict[str, Any] = dict(spec.presidio_args)
    if spec.presidio == "PhoneRecognizer":
        regions = list(args.pop("supported_regions", _PHONE_REGIONS))
        leniency = int(args.pop("leniency", 1))
        if args:
            raise ValueError(f"recognizer {spec.name}: light mode cannot apply {sorted(args)}")
        return PhoneBuiltin(spec, regions, leniency)
    if spec.presidio not in _PATTERN_BUILTINS:
        raise ValueError(f"recognizer {spec.name}: light mode has no recognizer {spec.presidio}")
    if args:
        raise ValueError(f"recognizer {spec.name}: light mode cannot apply {sorted(args)}")
    patterns, validate, invalidate = _PATTERN_BUILTINS[spec.presidio]
    if spec.presidio_patterns is not None:
        own = {p[0]: p for p in patterns}
        missing = [n for n in spec.presidio_patterns if n not in own]
        if missing:
            raise ValueError(f"recognizer {spec.name}: {spec.presidio} has no pattern {missing}")
        patterns = [own[n] for n in spec.presidio_patterns]
    return BuiltinRecognizer(spec, patterns, timeout_s, validate, invalidate)
