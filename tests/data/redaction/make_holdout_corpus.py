"""Generate the independent credential corpus of issue 16 (``holdout-corpus.jsonl`` here).

Independent of the rules and of the reference corpus (``make_corpus.py``): a different
generator, written from the vendors' documented token formats (prefix, alphabet, length; the
sources are listed in docs/redaction-formats.md) rather than from the rules' regexes, that puts
every credential into every assignment and HTTP-authentication syntax, next to labelled
look-alikes (placeholders, documentation example keys, hex ids, UUIDs, GPU/MIG UUIDs, PCI ids,
versions, step counters, low-entropy values after a key word).

Two splits, from two seeds of the same generator:

- ``dev`` (seed 16_001): what the rules were tuned on while writing them (run it with
  ``--split dev --out PATH``; it is not checked in);
- ``holdout`` (seed 16_002, the default, checked in as ``holdout-corpus.jsonl``): generated once
  after the rules were written and never used to change them. CI gates on this one
  (tests/test_redaction_holdout.py): credential recall >= 0.99 and false positives <= 1%, per
  credential kind and per syntax.

Every item carries ``label`` (the credential kind, or ``lookalike:<what>`` for a non-secret) and
``syntax`` (how the value is written), which the review report breaks recall and false
positives down by. Other secret scanners' test fixtures are deliberately not used: they are the
independent check the issue is measured on. Standard library only:

    python tests/data/redaction/make_holdout_corpus.py [--split dev|holdout] [--out PATH]
"""

# ruff: noqa: E501  (token formats read best one per line)
from __future__ import annotations

import argparse
import base64
import json
import random
import string
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEEDS = {"dev": 16_001, "holdout": 16_002}
LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
ALNUM = LOWER + UPPER + DIGITS
HEXL = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "_-"
BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"

R = random.Random(0)


def rnd(chars: str, n: int) -> str:
    while True:
        s = "".join(R.choice(chars) for _ in range(n))
        # documented alphabets; a generated value must not look like a placeholder by chance
        if not any(c * 5 in s for c in set(s)) and "abcdef" not in s and "123456" not in s:
            return s


def b64url_json(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


# ---- credential kinds: (label, entity, generator, env-style variable name) ----------------------
Kind = tuple[str, str, Callable[[], str], str]

VENDOR: list[Kind] = [
    (
        "stripe_secret_live",
        "API_TOKEN",
        lambda: "sk_live_" + rnd(ALNUM, R.choice([24, 99])),
        "STRIPE_SECRET_KEY",
    ),
    (
        "stripe_restricted_live",
        "API_TOKEN",
        lambda: "rk_live_" + rnd(ALNUM, R.choice([24, 99])),
        "STRIPE_RESTRICTED_KEY",
    ),
    ("stripe_secret_test", "API_TOKEN", lambda: "sk_test_" + rnd(ALNUM, 24), "STRIPE_TEST_KEY"),
    (
        "stripe_publishable",
        "API_TOKEN",
        lambda: R.choice(["pk_live_", "pk_test_"]) + rnd(ALNUM, 24),
        "STRIPE_PUBLISHABLE_KEY",
    ),
    (
        "stripe_webhook_secret",
        "API_TOKEN",
        lambda: "whsec_" + rnd(ALNUM, 32),
        "STRIPE_WEBHOOK_SECRET",
    ),
    (
        "sendgrid",
        "API_TOKEN",
        lambda: "SG." + rnd(B64URL, 22) + "." + rnd(B64URL, 43),
        "SENDGRID_API_KEY",
    ),
    (
        "pypi",
        "API_TOKEN",
        lambda: "pypi-AgEIcHlwaS5vcmc" + rnd(B64URL, R.randint(60, 160)),
        "TWINE_PASSWORD",
    ),
    ("npm", "API_TOKEN", lambda: "npm_" + rnd(ALNUM, 36), "NPM_TOKEN"),
    (
        "discord_bot",
        "API_TOKEN",
        lambda: R.choice("MNO") + rnd(B64URL, 25) + "." + rnd(B64URL, 6) + "." + rnd(B64URL, 38),
        "DISCORD_BOT_TOKEN",
    ),
    (
        "slack_bot",
        "API_TOKEN",
        lambda: f"xoxb-{R.randint(10**9, 10**12)}-{R.randint(10**9, 10**12)}-{rnd(ALNUM, 24)}",
        "SLACK_BOT_TOKEN",
    ),
    (
        "slack_user",
        "API_TOKEN",
        lambda: (
            f"xoxp-{R.randint(10**9, 10**12)}-{R.randint(10**9, 10**12)}-{R.randint(10**9, 10**12)}-{rnd(HEXL, 32)}"
        ),
        "SLACK_USER_TOKEN",
    ),
    (
        "slack_workspace",
        "API_TOKEN",
        lambda: f"xoxa-2-{R.randint(10**9, 10**12)}-{rnd(ALNUM, 30)}",
        "SLACK_TOKEN",
    ),
    ("slack_refresh", "API_TOKEN", lambda: f"xoxe-1-{rnd(ALNUM, 140)}", "SLACK_REFRESH_TOKEN"),
    (
        "slack_app",
        "API_TOKEN",
        lambda: f"xapp-1-A{rnd(UPPER + DIGITS, 10)}-{R.randint(10**12, 10**13)}-{rnd(HEXL, 64)}",
        "SLACK_APP_TOKEN",
    ),
    ("gitlab_pat", "API_TOKEN", lambda: "glpat-" + rnd(B64URL, 20), "GITLAB_TOKEN"),
    ("gitlab_deploy", "API_TOKEN", lambda: "gldt-" + rnd(B64URL, 20), "CI_DEPLOY_PASSWORD"),
    ("gitlab_runner", "API_TOKEN", lambda: "glrt-" + rnd(B64URL, 20), "RUNNER_TOKEN"),
    ("gitlab_trigger", "API_TOKEN", lambda: "glptt-" + rnd(HEXL, 40), "TRIGGER_TOKEN"),
    (
        "gitlab_registration",
        "API_TOKEN",
        lambda: "GR1348941" + rnd(B64URL, 20),
        "REGISTRATION_TOKEN",
    ),
    ("github_pat", "API_TOKEN", lambda: "ghp_" + rnd(ALNUM, 36), "GITHUB_TOKEN"),
    ("github_oauth", "API_TOKEN", lambda: "gho_" + rnd(ALNUM, 36), "GH_OAUTH_TOKEN"),
    ("github_user_to_server", "API_TOKEN", lambda: "ghu_" + rnd(ALNUM, 36), "GH_USER_TOKEN"),
    ("github_server_to_server", "API_TOKEN", lambda: "ghs_" + rnd(ALNUM, 36), "GH_APP_TOKEN"),
    ("github_refresh", "API_TOKEN", lambda: "ghr_" + rnd(ALNUM, 76), "GH_REFRESH_TOKEN"),
    (
        "github_fine_grained",
        "API_TOKEN",
        lambda: "github_pat_" + rnd(ALNUM, 22) + "_" + rnd(ALNUM, 59),
        "GH_PAT",
    ),
    ("vault_service", "API_TOKEN", lambda: "hvs." + rnd(B64URL, R.choice([24, 90])), "VAULT_TOKEN"),
    ("vault_batch", "API_TOKEN", lambda: "hvb." + rnd(B64URL, 120), "VAULT_TOKEN"),
    ("vault_recovery", "API_TOKEN", lambda: "hvr." + rnd(B64URL, 24), "VAULT_RECOVERY_TOKEN"),
    (
        "atlassian",
        "API_TOKEN",
        lambda: "ATATT3xFfGF0" + rnd(B64URL, 170) + "=" + rnd(UPPER + DIGITS, 8),
        "JIRA_API_TOKEN",
    ),
    ("twilio_api_key", "API_TOKEN", lambda: "SK" + rnd(HEXL, 32), "TWILIO_API_KEY"),
    ("twilio_account_sid", "API_TOKEN", lambda: "AC" + rnd(HEXL, 32), "TWILIO_ACCOUNT_SID"),
    (
        "meta_access_token",
        "API_TOKEN",
        lambda: "EAA" + R.choice("BGI") + rnd(ALNUM, R.randint(100, 190)),
        "FB_ACCESS_TOKEN",
    ),
    ("flyio_org", "API_TOKEN", lambda: "fo1_" + rnd(B64URL, 43), "FLY_API_TOKEN"),
    ("flyio_macaroon", "API_TOKEN", lambda: "FlyV1 fm2_" + rnd(B64 + "=", 300), "FLY_ACCESS_TOKEN"),
    (
        "sentry_org",
        "API_TOKEN",
        lambda: (
            "sntrys_"
            + b64url_json(
                {"iat": R.randint(10**9, 2 * 10**9), "url": "https://sentry.io", "org": "acme"}
            )
            + "_"
            + rnd(B64URL, 43)
        ),
        "SENTRY_AUTH_TOKEN",
    ),
    ("sentry_user", "API_TOKEN", lambda: "sntryu_" + rnd(HEXL, 64), "SENTRY_TOKEN"),
    (
        "mailchimp",
        "API_TOKEN",
        lambda: rnd(HEXL, 32) + f"-us{R.randint(1, 21)}",
        "MAILCHIMP_API_KEY",
    ),
    (
        "google_oauth_client_secret",
        "API_TOKEN",
        lambda: "GOCSPX-" + rnd(B64URL, 28),
        "GOOGLE_CLIENT_SECRET",
    ),
    (
        "anthropic",
        "API_TOKEN",
        lambda: "sk-ant-api03-" + rnd(B64URL, 93) + "AA",
        "ANTHROPIC_API_KEY",
    ),
    ("openai_project", "API_TOKEN", lambda: "sk-proj-" + rnd(B64URL, 156), "OPENAI_API_KEY"),
    (
        "openai_legacy",
        "API_TOKEN",
        lambda: "sk-" + rnd(ALNUM, 20) + "T3BlbkFJ" + rnd(ALNUM, 20),
        "OPENAI_API_KEY",
    ),
    ("huggingface", "API_TOKEN", lambda: "hf_" + rnd(ALNUM, 34), "HUGGING_FACE_HUB_TOKEN"),
    ("databricks", "API_TOKEN", lambda: "dapi" + rnd(HEXL, 32), "DATABRICKS_TOKEN"),
    (
        "digitalocean",
        "API_TOKEN",
        lambda: R.choice(["dop_v1_", "doo_v1_"]) + rnd(HEXL, 64),
        "DIGITALOCEAN_TOKEN",
    ),
    (
        "doppler",
        "API_TOKEN",
        lambda: R.choice(["dp.st.prd.", "dp.pt.", "dp.ct.", "dp.sa."]) + rnd(ALNUM, 43),
        "DOPPLER_TOKEN",
    ),
    ("linear", "API_TOKEN", lambda: "lin_api_" + rnd(ALNUM, 40), "LINEAR_API_KEY"),
    (
        "notion",
        "API_TOKEN",
        lambda: R.choice(["secret_" + rnd(ALNUM, 43), "ntn_" + rnd(DIGITS, 11) + rnd(ALNUM, 35)]),
        "NOTION_TOKEN",
    ),
    (
        "shopify",
        "API_TOKEN",
        lambda: R.choice(["shpat_", "shpss_", "shpca_", "shppa_"]) + rnd(HEXL, 32),
        "SHOPIFY_ACCESS_TOKEN",
    ),
    (
        "square",
        "API_TOKEN",
        lambda: R.choice(
            ["EAAA" + rnd(B64URL, 60), "sq0atp-" + rnd(B64URL, 22), "sq0csp-" + rnd(B64URL, 43)]
        ),
        "SQUARE_ACCESS_TOKEN",
    ),
    (
        "telegram_bot",
        "API_TOKEN",
        lambda: f"{R.randint(10**8, 10**10 - 1)}:AA{rnd(B64URL, 33)}",
        "TELEGRAM_BOT_TOKEN",
    ),
    ("heroku", "API_TOKEN", lambda: "HRKU-AA" + rnd(B64URL, 58), "HEROKU_API_KEY"),
    (
        "newrelic",
        "API_TOKEN",
        lambda: R.choice(["NRAK-" + rnd(UPPER + DIGITS, 27), rnd(HEXL, 36) + "NRAL"]),
        "NEW_RELIC_API_KEY",
    ),
    (
        "planetscale",
        "API_TOKEN",
        lambda: R.choice(["pscale_tkn_", "pscale_pw_"]) + rnd(B64URL, 43),
        "PLANETSCALE_TOKEN",
    ),
    (
        "postman",
        "API_TOKEN",
        lambda: "PMAK-" + rnd(HEXL, 24) + "-" + rnd(HEXL, 34),
        "POSTMAN_API_KEY",
    ),
    ("pulumi", "API_TOKEN", lambda: "pul-" + rnd(HEXL, 40), "PULUMI_ACCESS_TOKEN"),
    (
        "grafana_cloud",
        "API_TOKEN",
        lambda: (
            "glc_"
            + base64.b64encode(
                json.dumps(
                    {
                        "o": str(R.randint(10**5, 10**6)),
                        "n": "stack-" + rnd(LOWER, 5),
                        "k": rnd(ALNUM, 24),
                        "m": {"r": "us"},
                    }
                ).encode()
            ).decode()
        ),
        "GRAFANA_CLOUD_TOKEN",
    ),
    (
        "grafana_service_account",
        "API_TOKEN",
        lambda: "glsa_" + rnd(ALNUM, 32) + "_" + rnd(HEXL, 8),
        "GRAFANA_SA_TOKEN",
    ),
    (
        "dynatrace",
        "API_TOKEN",
        lambda: "dt0c01." + rnd(UPPER + DIGITS, 24) + "." + rnd(UPPER + DIGITS, 64),
        "DT_API_TOKEN",
    ),
    ("docker_hub", "API_TOKEN", lambda: "dckr_pat_" + rnd(B64URL, 27), "DOCKERHUB_TOKEN"),
    (
        "sonarqube",
        "API_TOKEN",
        lambda: R.choice(["sqp_", "squ_", "sqa_"]) + rnd(HEXL, 40),
        "SONAR_TOKEN",
    ),
    (
        "azure_ad_client_secret",
        "API_TOKEN",
        lambda: rnd(ALNUM, 3) + str(R.randint(0, 9)) + "Q~" + rnd(ALNUM + "_~.-", 34),
        "AZURE_CLIENT_SECRET",
    ),
    (
        "tailscale",
        "API_TOKEN",
        lambda: f"tskey-auth-k{rnd(ALNUM, 10)}CNTRL-{rnd(ALNUM, 33)}",
        "TS_AUTHKEY",
    ),
    (
        "terraform_cloud",
        "API_TOKEN",
        lambda: rnd(ALNUM, 14) + ".atlasv1." + rnd(B64URL, 67),
        "TFE_TOKEN",
    ),
    ("replicate", "API_TOKEN", lambda: "r8_" + rnd(ALNUM, 37), "REPLICATE_API_TOKEN"),
    ("groq", "API_TOKEN", lambda: "gsk_" + rnd(ALNUM, 52), "GROQ_API_KEY"),
    (
        "langsmith",
        "API_TOKEN",
        lambda: "lsv2_pt_" + rnd(HEXL, 32) + "_" + rnd(HEXL, 10),
        "LANGSMITH_API_KEY",
    ),
    (
        "age_secret_key",
        "API_TOKEN",
        lambda: "AGE-SECRET-KEY-1" + rnd(BECH32, 58).upper(),
        "SOPS_AGE_KEY",
    ),
    (
        "aws_access_key_id",
        "CLOUD_ACCESS_KEY",
        lambda: (
            R.choice(["AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"])
            + rnd(UPPER + "234567", 16)
        ),
        "AWS_ACCESS_KEY_ID",
    ),
    ("google_api_key", "CLOUD_ACCESS_KEY", lambda: "AIza" + rnd(B64URL, 35), "GOOGLE_API_KEY"),
    (
        "jwt",
        "JWT",
        lambda: (
            b64url_json({"alg": "RS256", "typ": "JWT"})
            + "."
            + b64url_json({"sub": rnd(LOWER, 8), "exp": R.randint(10**9, 2 * 10**9)})
            + "."
            + rnd(B64URL, 86)
        ),
        "ID_TOKEN",
    ),
    (
        "jwt_unsigned",
        "JWT",
        lambda: (
            b64url_json({"alg": "none", "typ": "JWT"})
            + "."
            + b64url_json({"sub": rnd(LOWER, 8), "admin": True})
            + "."
        ),
        "SESSION_JWT",
    ),
    ("wandb_key_named", "API_TOKEN", lambda: rnd(HEXL, 40), "WANDB_API_KEY"),
]

#: credentials without a prefix: only the name they are assigned to says what they are
GENERIC: list[Kind] = [
    (
        "heroku_legacy_uuid",
        "API_TOKEN",
        lambda: f"{rnd(HEXL, 8)}-{rnd(HEXL, 4)}-4{rnd(HEXL, 3)}-a{rnd(HEXL, 3)}-{rnd(HEXL, 12)}",
        "HEROKU_KEY",
    ),
    (
        "snyk_uuid",
        "API_TOKEN",
        lambda: f"{rnd(HEXL, 8)}-{rnd(HEXL, 4)}-4{rnd(HEXL, 3)}-b{rnd(HEXL, 3)}-{rnd(HEXL, 12)}",
        "SNYK_KEY",
    ),
    ("sonar_login", "API_TOKEN", lambda: rnd(HEXL, 40), "SONAR_LOGIN"),
    ("datadog_api_key", "API_TOKEN", lambda: rnd(HEXL, 32), "DD_API_KEY"),
    ("datadog_app_key", "API_TOKEN", lambda: rnd(HEXL, 40), "DD_APP_KEY"),
    ("twilio_auth_token", "API_TOKEN", lambda: rnd(HEXL, 32), "TWILIO_AUTH_TOKEN"),
    ("okta_token", "API_TOKEN", lambda: "00" + rnd(B64URL, 40), "OKTA_API_TOKEN"),
    ("cloudflare_token", "API_TOKEN", lambda: rnd(B64URL, 40), "CLOUDFLARE_API_TOKEN"),
    ("generic_client_secret", "API_TOKEN", lambda: rnd(ALNUM + "~._-", 34), "OAUTH_CLIENT_SECRET"),
    ("generic_hex_secret", "API_TOKEN", lambda: rnd(HEXL, 64), "SESSION_SECRET"),
]

AWS_SECRET: Kind = (
    "aws_secret_access_key",
    "CLOUD_SECRET_KEY",
    lambda: rnd(B64[:-2] + "/+", 40),
    "AWS_SECRET_ACCESS_KEY",
)
AZURE_KEY: Kind = (
    "azure_storage_account_key",
    "CLOUD_SECRET_KEY",
    lambda: rnd(B64, 86) + "==",
    "AZURE_STORAGE_KEY",
)


def pem_block(kind: str) -> str:
    body = "\n".join(rnd(B64, 64) for _ in range(R.randint(3, 8)))
    if kind == "PGP":
        return f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{body}\n={rnd(B64, 4)}\n-----END PGP PRIVATE KEY BLOCK-----"
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


# ---- syntaxes ---------------------------------------------------------------------------------
# each returns (prefix, suffix) around the value; {n} is the variable name
SYNTAX: dict[str, Callable[[str], tuple[str, str]]] = {
    "env": lambda n: (f"{n}=", ""),
    "export": lambda n: (f"export {n}=", ""),
    "env_quoted": lambda n: (f'{n}="', '"'),
    "yaml": lambda n: (f"  {n.lower()}: ", ""),
    "yaml_quoted": lambda n: (f"{n.lower()}: '", "'"),
    "json": lambda n: (f'{{"{n.lower()}": "', '", "region": "us-east-1"}'),
    "go_walrus": lambda n: (f'{n.lower()} := "', '"'),
    "make_qassign": lambda n: (f"{n} ?= ", ""),
    "ruby_arrow": lambda n: (f":{n.lower()} => '", "'"),
    "python_kwarg": lambda n: (f"Client({n.lower()}='", "')"),
    "cli_flag": lambda n: (f"--{n.lower().replace('_', '-')} ", " --verbose"),
    "cli_flag_eq": lambda n: (f"--{n.lower().replace('_', '-')}=", ""),
    "dotenv_comment": lambda n: (f"{n}=", "  # rotated 2026-11"),
    "bare_log": lambda n: ("loaded credentials ", " from vault"),
}
#: the syntaxes in which a prefix-less value is still a credential (its name is there)
NAMED = [s for s in SYNTAX if s != "bare_log"]

LOG_WRAP = [
    ("", ""),
    ("[rank3]: ", ""),
    ("E1204 10:12:01.123456 4242 launcher.py:88] env: ", ""),
    (
        'Traceback (most recent call last):\n  File "/opt/app/train.py", line 12, in <module>\n    ',
        "\nKeyError: 'x'",
    ),
    ("+ ", ""),
]


class Item:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[dict[str, object]] = []
        self.pos = 0

    def add(self, s: str, entity: str | None = None) -> Item:
        if entity:
            self.spans.append({"entity": entity, "start": self.pos, "end": self.pos + len(s)})
        self.parts.append(s)
        self.pos += len(s)
        return self

    @property
    def text(self) -> str:
        return "".join(self.parts)


def item(
    n: int,
    label: str,
    syntax: str,
    it: Item,
    kind: str = "comm_event",
    field: str = "payload.message",
) -> dict[str, object]:
    cat = (
        "benign"
        if not it.spans
        else "credential"
        if any(s["entity"] not in ("EMAIL_ADDRESS",) for s in it.spans)
        else "contact"
    )
    return {
        "id": f"h-{label}-{syntax}-{n:03d}",
        "kind": kind,
        "field": field,
        "text": it.text,
        "spans": it.spans,
        "category": cat,
        "label": label,
        "syntax": syntax,
    }


def credential_items() -> list[dict[str, object]]:
    out = []
    n = 0
    for label, entity, gen, name in [*VENDOR, AWS_SECRET, AZURE_KEY, *GENERIC]:
        syntaxes = (
            list(SYNTAX)
            if (label, entity, gen, name) in VENDOR and label not in ("wandb_key_named",)
            else NAMED
        )
        if label in ("aws_secret_access_key", "azure_storage_account_key"):
            syntaxes = ["env", "yaml", "json", "python_kwarg", "env_quoted", "cli_flag_eq"]
        for syntax in syntaxes:
            n += 1
            pre, post = SYNTAX[syntax](name)
            wrap = R.choice(LOG_WRAP)
            value = gen()
            if label == "azure_storage_account_key":
                pre = (
                    pre
                    + f"DefaultEndpointsProtocol=https;AccountName=st{rnd(LOWER, 8)};AccountKey="
                )
                post = ";EndpointSuffix=core.windows.net" + post
            it = Item().add(wrap[0] + pre)
            if label == "flyio_macaroon":
                it.add("FlyV1 ").add(value[6:], entity)
            else:
                it.add(value, entity)
            it.add(post + wrap[1])
            out.append(item(n, label, syntax, it))
    # AWS key id and secret together: AKIA...:secret, and the two variables
    for _k in range(12):
        n += 1
        it = Item().add(R.choice(["creds ", "aws configure import: ", "S3 auth failed for "]))
        it.add(VENDOR[[v[0] for v in VENDOR].index("aws_access_key_id")][2](), "CLOUD_ACCESS_KEY")
        it.add(R.choice([":", ":", " : ", ","]))
        it.add(AWS_SECRET[2](), "CLOUD_SECRET_KEY")
        out.append(item(n, "aws_key_pair", "keyid_colon_secret", it))
    # private keys: PEM (PKCS#8, RSA, EC, OpenSSH, encrypted) and PGP, raw and JSON-escaped
    for kind in ["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "PGP"]:
        for syntax in ("raw", "json_escaped", "gcp_service_account"):
            n += 1
            block = pem_block(kind)
            if syntax == "raw":
                it = Item().add("key file contents:\n").add(block, "PRIVATE_KEY").add("\n")
            else:
                esc = block.replace("\n", "\\n")
                head = (
                    '{"type": "service_account", "private_key": "'
                    if syntax == "gcp_service_account"
                    else '{"key": "'
                )
                it = Item().add(head).add(esc, "PRIVATE_KEY").add('\\n", "client_id": "1"}')
            out.append(
                item(n, "private_key_pgp" if kind == "PGP" else "private_key_pem", syntax, it)
            )
    out.extend(http_auth_items(n))
    return out


def http_auth_items(n: int) -> list[dict[str, object]]:
    out = []
    users = ["deploy", "ci-bot", "alice.smith@example.com", "svc_train", "bob@corp.example"]
    for _k in range(15):
        user = R.choice(users)
        pw = rnd(ALNUM + "!#%^*_-+", R.randint(10, 24))
        token = rnd(B64URL, R.randint(24, 48))
        basic = base64.b64encode(f"{user}:{pw}".encode()).decode()

        def with_user(it: Item, u: str) -> Item:
            return it.add(u, "EMAIL_ADDRESS") if "@" in u else it.add(u)

        forms: list[tuple[str, Item]] = [
            (
                "authorization_basic",
                Item().add("-H 'Authorization: Basic ").add(basic, "PASSWORD").add("'"),
            ),
            ("authorization_token", Item().add("Authorization: Token ").add(token, "BEARER_TOKEN")),
            (
                "authorization_bearer",
                Item()
                .add("headers={'Authorization': 'Bearer ")
                .add(token, "BEARER_TOKEN")
                .add("'}"),
            ),
            ("header_api_token", Item().add("Api-Token: ").add(token, "API_TOKEN")),
            ("header_x_api_key", Item().add('-H "X-API-Key: ').add(token, "API_TOKEN").add('"')),
            (
                "header_private_token",
                Item().add('--header "PRIVATE-TOKEN: ').add(token, "API_TOKEN").add('"'),
            ),
            (
                "curl_u",
                with_user(Item().add("curl -sS -u "), user)
                .add(":")
                .add(pw, "PASSWORD")
                .add(" https://artifacts.internal/api"),
            ),
            (
                "curl_user_eq",
                with_user(Item().add("curl --user="), user)
                .add(":")
                .add(pw, "PASSWORD")
                .add(" -X POST"),
            ),
            (
                "url_userinfo",
                Item()
                .add("git clone https://")
                .add(user.split("@")[0])
                .add(":")
                .add(
                    pw.replace("#", "x").replace("%", "x").replace("^", "x").replace("+", "x"),
                    "PASSWORD",
                )
                .add("@git.internal/ml/repo.git"),
            ),
            ("password_yaml", Item().add("  db_password: ").add(pw, "PASSWORD")),
            (
                "password_json_spaces",
                Item()
                .add('{"password": "')
                .add(pw[:8] + " " + pw[8:] + " [x]", "PASSWORD")
                .add('"}'),
            ),
            ("password_walrus", Item().add('smtp_pass := "').add(pw, "PASSWORD").add('"')),
        ]
        for syntax, it in forms:
            n += 1
            out.append(
                item(
                    n,
                    "http_auth"
                    if syntax.startswith(("authorization", "header", "curl", "url"))
                    else "password",
                    syntax,
                    it,
                )
            )
    return out


# ---- look-alikes ------------------------------------------------------------------------------
def lookalike_items() -> list[dict[str, object]]:
    out = []
    n = 5000
    placeholders = [
        "xxxxxxxxxxxxxxxxxxxxxxxx",
        "<token>",
        "<your-api-key>",
        "${API_TOKEN}",
        "$GITHUB_TOKEN",
        "changeme",
        "your-api-key-here",
        "YOUR_API_KEY",
        "REPLACE_ME",
        "********",
        "<redacted>",
        "{{ secrets.NPM_TOKEN }}",
        "%(password)s",
        "None",
        "null",
        "''",
        "dummy-token-for-tests",
        "insert-your-token",
        "aaaaaaaaaaaaaaaaaaaaaaaa",
        "0000000000000000000000000000000000000000",
        "sk_live_xxxxxxxxxxxxxxxxxxxxxxxx",
        "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "xoxb-your-bot-token",
        "glpat-xxxxxxxxxxxxxxxxxxxx",
        "sk-...",
        "pypi-<token>",
        "npm_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    ]
    names = [
        "API_KEY",
        "GITHUB_TOKEN",
        "STRIPE_SECRET_KEY",
        "password",
        "client_secret",
        "HEROKU_KEY",
        "NPM_TOKEN",
    ]
    for p in placeholders:
        for syntax in ("env", "yaml", "json", "cli_flag"):
            n += 1
            pre, post = SYNTAX[syntax](R.choice(names))
            out.append(item(n, "lookalike:placeholder", syntax, Item().add(pre + p + post)))
    others: list[tuple[str, Callable[[], str]]] = [
        ("git_sha", lambda: f"commit {rnd(HEXL, 40)}"),
        ("trace_id", lambda: f"trace_id={rnd(HEXL, 32)} span_id={rnd(HEXL, 16)}"),
        (
            "nccl_comm_id",
            lambda: (
                f"NCCL INFO comm 0x{rnd(HEXL, 12)} rank 3 nranks 64 cudaDev 3 busId 3b000 commId 0x{rnd(HEXL, 16)} - Init COMPLETE"
            ),
        ),
        ("nccl_unique_id", lambda: "ncclUniqueId " + " ".join(rnd(HEXL, 2) for _ in range(16))),
        (
            "uuid_run_id",
            lambda: (
                f"run_id={rnd(HEXL, 8)}-{rnd(HEXL, 4)}-4{rnd(HEXL, 3)}-a{rnd(HEXL, 3)}-{rnd(HEXL, 12)} started"
            ),
        ),
        (
            "uuid_pod_uid",
            lambda: (
                f"pod uid {rnd(HEXL, 8)}-{rnd(HEXL, 4)}-{rnd(HEXL, 4)}-{rnd(HEXL, 4)}-{rnd(HEXL, 12)} evicted"
            ),
        ),
        (
            "gpu_uuid",
            lambda: (
                f"GPU-{rnd(HEXL, 8)}-{rnd(HEXL, 4)}-{rnd(HEXL, 4)}-{rnd(HEXL, 4)}-{rnd(HEXL, 12)} fell off the bus"
            ),
        ),
        (
            "mig_uuid",
            lambda: (
                f"CUDA_VISIBLE_DEVICES=MIG-{rnd(HEXL, 8)}-{rnd(HEXL, 4)}-{rnd(HEXL, 4)}-{rnd(HEXL, 4)}-{rnd(HEXL, 12)}"
            ),
        ),
        (
            "pci_id",
            lambda: f"NVRM: Xid (PCI:0000:{rnd(HEXL, 2)}:00): 79, GPU has fallen off the bus.",
        ),
        (
            "version",
            lambda: (
                f"NCCL version 2.{R.randint(10, 23)}.{R.randint(1, 9)}+cuda12.{R.randint(0, 6)} driver {R.randint(500, 580)}.{R.randint(10, 99)}.{R.randint(1, 20)}"
            ),
        ),
        (
            "step_counter",
            lambda: (
                f"step={R.randint(1, 10**6)} loss={R.random():.4f} tokens/s={R.randint(10**4, 10**6)} lr=3e-4"
            ),
        ),
        (
            "max_tokens",
            lambda: f"generate(max_tokens={R.choice([256, 1024, 2048, 4096])}, top_p=0.9)",
        ),
        ("sha256_digest", lambda: f"sha256:{rnd(HEXL, 64)}"),
        (
            "low_entropy_key_value",
            lambda: (
                f"{R.choice(['key', 'sort_key', 'token_type', 'auth', 'secret_name', 'api_key_source'])}: {R.choice(['gpu_util', 'bearer', 'kerberos', 'train-metrics', 'env', 'vault'])}"
            ),
        ),
        (
            "token_file_path",
            lambda: (
                f"--token-file /var/run/secrets/{rnd(LOWER, 6)}/token --key /etc/ssl/private/server.key"
            ),
        ),
        ("public_key", lambda: f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{rnd(B64, 43)} user@host"),
        ("secret_ref", lambda: f"secretKeyRef: name={rnd(LOWER, 8)}-credentials key=api-token"),
        (
            "hostname",
            lambda: f"node{R.randint(100, 999)}.cluster.internal port {R.randint(1024, 65535)}",
        ),
    ]
    for what, gen in others:
        for _k in range(12):
            n += 1
            out.append(item(n, f"lookalike:{what}", "log_line", Item().add(gen())))
    return out


def verify(items: list[dict[str, object]]) -> None:
    ids = Counter(str(i["id"]) for i in items)
    assert max(ids.values()) == 1, ids.most_common(3)
    for i in items:
        text = str(i["text"])
        for s in i["spans"]:  # type: ignore[attr-defined]
            v = text[s["start"] : s["end"]]
            assert v and v == v.strip(), (i["id"], v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=sorted(SEEDS), default="holdout")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    R.seed(SEEDS[args.split])
    items = credential_items() + lookalike_items()
    verify(items)
    out = args.out or HERE / f"{args.split}-corpus.jsonl"
    out.write_text(
        "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8"
    )
    c = Counter(str(i["category"]) for i in items)
    print(
        f"{out}: {len(items)} items; {dict(c)}; {len({i['label'] for i in items})} labels",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
