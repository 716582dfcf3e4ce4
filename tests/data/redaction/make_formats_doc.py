"""Writes docs/redaction-formats.md from redaction/rules.yaml and the source table below.

Run from the repository root: ``python tests/data/redaction/make_formats_doc.py``.
"""

from pathlib import Path

import yaml

# pattern name -> (vendor, documentation page, checked through a documentation search this session);
# package registries' own pages are named by title rather than by address
SOURCES = {
    "stripe_secret_live": ("Stripe", "https://docs.stripe.com/keys", True),
    "stripe_restricted_live": ("Stripe", "https://docs.stripe.com/keys", True),
    "stripe_test": ("Stripe", "https://docs.stripe.com/api/authentication", True),
    "stripe_publishable": ("Stripe", "https://docs.stripe.com/keys", True),
    "stripe_webhook_secret": ("Stripe", "https://docs.stripe.com/webhooks", False),
    "sendgrid": (
        "Twilio SendGrid",
        "https://www.twilio.com/docs/sendgrid/ui/account-and-settings/api-keys",
        False,
    ),
    "pypi": ("PyPI", "PyPI help, section on API tokens (the registry's own help page)", True),
    "npm": ("npm", "npm Docs, About access tokens", True),
    "discord_bot": (
        "Discord",
        "https://discord.com/developers/docs/reference#authentication",
        False,
    ),
    "discord_webhook": ("Discord", "https://discord.com/developers/docs/resources/webhook", False),
    "slack_app_token": ("Slack", "https://docs.slack.dev/authentication/tokens", True),
    "slack_webhook": (
        "Slack",
        "https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks",
        False,
    ),
    "gitlab_deploy": (
        "GitLab",
        "https://gitlab.com/gitlab-org/gitlab/-/merge_requests/138438",
        True,
    ),
    "gitlab_runner": ("GitLab", "https://docs.gitlab.com/security/tokens/#token-prefixes", False),
    "gitlab_pipeline_trigger": (
        "GitLab",
        "https://docs.gitlab.com/security/tokens/#token-prefixes",
        False,
    ),
    "gitlab_other": ("GitLab", "https://docs.gitlab.com/security/tokens/#token-prefixes", False),
    "gitlab_runner_registration": (
        "GitLab",
        "https://docs.gitlab.com/security/tokens/#token-prefixes",
        False,
    ),
    "vault_service": (
        "HashiCorp Vault",
        "https://developer.hashicorp.com/vault/docs/concepts/tokens",
        True,
    ),
    "vault_batch": (
        "HashiCorp Vault",
        "https://developer.hashicorp.com/vault/docs/concepts/tokens",
        True,
    ),
    "vault_recovery": (
        "HashiCorp Vault",
        "https://developer.hashicorp.com/vault/api-docs/system/generate-recovery-token",
        True,
    ),
    "atlassian_api": (
        "Atlassian",
        "https://support.atlassian.com/atlassian-account/docs/manage-api-tokens-for-your-atlassian-account/",
        False,
    ),
    "bitbucket_app_password": (
        "Atlassian Bitbucket",
        "https://support.atlassian.com/bitbucket-cloud/docs/app-passwords/",
        False,
    ),
    "twilio_api_key": ("Twilio", "https://www.twilio.com/docs/iam/api-keys", False),
    "twilio_account_sid": ("Twilio", "https://www.twilio.com/docs/glossary/what-is-a-sid", False),
    "meta_access_token": (
        "Meta (Facebook)",
        "https://developers.facebook.com/docs/facebook-login/guides/access-tokens",
        False,
    ),
    "flyio_org": ("Fly.io", "https://fly.io/docs/security/tokens/", False),
    "flyio_macaroon": ("Fly.io", "https://fly.io/docs/security/tokens/", False),
    "sentry_org": (
        "Sentry",
        "https://docs.sentry.io/security-legal-pii/security/token-formats/",
        True,
    ),
    "sentry_user": (
        "Sentry",
        "https://docs.sentry.io/security-legal-pii/security/token-formats/",
        True,
    ),
    "mailchimp": (
        "Mailchimp",
        "https://mailchimp.com/developer/marketing/guides/quick-start/",
        False,
    ),
    "mailgun": (
        "Mailgun",
        "https://documentation.mailgun.com/docs/mailgun/api-reference/authentication/",
        False,
    ),
    "google_oauth_client_secret": (
        "Google Cloud",
        "https://support.google.com/cloud/answer/15549257",
        False,
    ),
    "google_oauth_access_token": (
        "Google Identity",
        "https://developers.google.com/identity/protocols/oauth2",
        False,
    ),
    "google_oauth_refresh_token": (
        "Google Identity",
        "https://developers.google.com/identity/protocols/oauth2",
        False,
    ),
    "anthropic": ("Anthropic", "https://docs.anthropic.com/en/api/getting-started", False),
    "openai_project": (
        "OpenAI",
        "https://platform.openai.com/docs/api-reference/authentication",
        False,
    ),
    "huggingface_org": ("Hugging Face", "https://huggingface.co/docs/hub/security-tokens", False),
    "databricks": ("Databricks", "https://docs.databricks.com/en/dev-tools/auth/pat.html", False),
    "digitalocean": (
        "DigitalOcean",
        "https://docs.digitalocean.com/reference/api/create-personal-access-token/",
        False,
    ),
    "doppler": ("Doppler", "https://docs.doppler.com/docs/Auth-token-formats", True),
    "doppler_service": ("Doppler", "https://docs.doppler.com/docs/Auth-token-formats", True),
    "linear": (
        "Linear",
        "https://developers.linear.app/docs/graphql/working-with-the-graphql-api",
        False,
    ),
    "notion": ("Notion", "https://developers.notion.com/docs/authorization", False),
    "shopify": (
        "Shopify",
        "https://shopify.dev/docs/apps/build/authentication-authorization/access-tokens",
        False,
    ),
    "square": ("Square", "https://developer.squareup.com/docs/build-basics/access-tokens", False),
    "telegram_bot": ("Telegram", "https://core.telegram.org/bots/api#authorizing-your-bot", False),
    "heroku": ("Heroku", "https://devcenter.heroku.com/articles/authentication", False),
    "newrelic": (
        "New Relic",
        "https://docs.newrelic.com/docs/apis/intro-apis/new-relic-api-keys/",
        False,
    ),
    "planetscale": ("PlanetScale", "https://planetscale.com/docs/concepts/service-tokens", False),
    "postman": (
        "Postman",
        "https://learning.postman.com/docs/developer/postman-api/authentication/",
        False,
    ),
    "pulumi": (
        "Pulumi",
        "https://www.pulumi.com/docs/pulumi-cloud/access-management/access-tokens/",
        False,
    ),
    "grafana_cloud": (
        "Grafana Labs",
        "https://grafana.com/docs/grafana-cloud/security-and-account-management/authentication-and-permissions/access-policies/",
        False,
    ),
    "grafana_service_account": (
        "Grafana Labs",
        "https://grafana.com/docs/grafana-cloud/alerting-and-irm/irm/reference/incident-api/auth/",
        True,
    ),
    "grafana_api_key": (
        "Grafana Labs",
        "https://grafana.com/docs/grafana-cloud/developer-resources/api-reference/http-api/authentication",
        True,
    ),
    "dynatrace": (
        "Dynatrace",
        "https://docs.dynatrace.com/docs/manage/identity-access-management/access-tokens-and-oauth-clients/access-tokens",
        False,
    ),
    "airtable": (
        "Airtable",
        "https://support.airtable.com/docs/creating-personal-access-tokens",
        False,
    ),
    "figma": ("Figma", "https://www.figma.com/developers/api#access-tokens", False),
    "netlify": ("Netlify", "https://docs.netlify.com/api/get-started/#authentication", False),
    "supabase": ("Supabase", "https://supabase.com/docs/guides/api/api-keys", False),
    "replicate": ("Replicate", "https://replicate.com/docs/topics/security/api-tokens", False),
    "groq": ("Groq", "https://console.groq.com/docs/quickstart", False),
    "perplexity": ("Perplexity", "https://docs.perplexity.ai/guides/getting-started", False),
    "xai": ("xAI", "https://docs.x.ai/docs/overview", False),
    "langsmith": (
        "LangChain LangSmith",
        "https://docs.smith.langchain.com/administration/how_to_guides/organization_management/create_account_api_key",
        False,
    ),
    "tailscale": ("Tailscale", "https://tailscale.com/kb/1277/key-prefixes", False),
    "onepassword_service_account": (
        "1Password",
        "https://developer.1password.com/docs/service-accounts/",
        False,
    ),
    "terraform_cloud": (
        "HashiCorp Terraform Cloud",
        "https://developer.hashicorp.com/terraform/cloud-docs/users-teams-organizations/api-tokens",
        False,
    ),
    "buildkite": ("Buildkite", "https://buildkite.com/docs/apis/managing-api-tokens", False),
    "circleci": ("CircleCI", "https://circleci.com/docs/managing-api-tokens/", False),
    "docker_hub": (
        "Docker",
        "Docker Docs, personal access tokens",
        False,
    ),
    "jfrog": (
        "JFrog",
        "https://jfrog.com/help/r/jfrog-platform-administration-documentation/access-tokens",
        False,
    ),
    "sonarqube": (
        "SonarSource",
        "https://docs.sonarsource.com/sonarqube-server/latest/user-guide/managing-tokens/",
        False,
    ),
    "azure_devops_pat": (
        "Microsoft Azure DevOps",
        "https://learn.microsoft.com/en-us/azure/devops/organizations/accounts/use-personal-access-tokens-to-authenticate",
        False,
    ),
    "azure_ad_client_secret": (
        "Microsoft Entra ID",
        "https://learn.microsoft.com/en-us/purview/sit-defn-azure-ad-client-secret",
        False,
    ),
    "alibaba_access_key": (
        "Alibaba Cloud",
        "https://www.alibabacloud.com/help/en/ram/user-guide/create-an-accesskey-pair",
        False,
    ),
    "contentful": (
        "Contentful",
        "https://www.contentful.com/developers/docs/references/authentication/",
        False,
    ),
    "rubygems": ("RubyGems", "RubyGems Guides, API key scopes", False),
    "nuget": ("NuGet", "https://learn.microsoft.com/en-us/nuget/nuget-org/scoped-api-keys", False),
    "clojars": ("Clojars", "https://github.com/clojars/clojars-web/wiki/Deploy-Tokens", False),
    "pinecone": ("Pinecone", "https://docs.pinecone.io/guides/projects/manage-api-keys", False),
    "prefect": ("Prefect", "https://docs.prefect.io/v3/manage/cloud/manage-users/api-keys", False),
    "razorpay": ("Razorpay", "https://razorpay.com/docs/api/authentication/", False),
    "flutterwave": ("Flutterwave", "https://developer.flutterwave.com/docs/authentication", False),
    "easypost": ("EasyPost", "https://docs.easypost.com/docs/authentication", False),
    "shippo": ("Shippo", "https://docs.goshippo.com/docs/guides_general/authentication/", False),
    "mapbox_secret": ("Mapbox", "https://docs.mapbox.com/accounts/guides/tokens/", False),
    "adafruit": ("Adafruit IO", "https://io.adafruit.com/api/docs/#authentication", False),
    "age_secret_key": ("age", "https://age-encryption.org/v1", True),
    # our own recognizers (not in vendor_token)
    "aws_key_id": (
        "AWS",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids",
        False,
    ),
    "aws_secret_assignment": (
        "AWS",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html",
        False,
    ),
    "aws_secret_after_key_id": (
        "AWS",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html",
        False,
    ),
    "google_api_key": (
        "Google Cloud",
        "https://cloud.google.com/docs/authentication/api-keys",
        False,
    ),
    "hf_token": ("Hugging Face", "https://huggingface.co/docs/hub/security-tokens", False),
    "github_classic": (
        "GitHub",
        "https://github.blog/changelog/2021-03-31-authentication-token-format-updates-are-generally-available",
        True,
    ),
    "github_fine_grained": (
        "GitHub",
        "https://github.blog/changelog/2021-03-31-authentication-token-format-updates-are-generally-available",
        True,
    ),
    "openai_key": (
        "OpenAI / Anthropic",
        "https://platform.openai.com/docs/api-reference/authentication",
        False,
    ),
    "slack_token": ("Slack", "https://docs.slack.dev/authentication/tokens", True),
    "gitlab_pat": ("GitLab", "https://gitlab.com/gitlab-org/gitlab/-/issues/342327", True),
    "wandb_key": (
        "Weights & Biases",
        "https://docs.wandb.ai/guides/track/environment-variables",
        False,
    ),
    "account_key": (
        "Microsoft Azure Storage",
        "https://learn.microsoft.com/en-us/azure/storage/common/storage-configure-connection-string",
        False,
    ),
    "shared_access_key": (
        "Microsoft Azure Service Bus / Event Hubs",
        "https://learn.microsoft.com/en-us/azure/service-bus-messaging/service-bus-sas",
        False,
    ),
    "pem_block": (
        "RFC 7468 (PEM), incl. GCP service-account JSON private_key",
        "https://www.rfc-editor.org/rfc/rfc7468",
        False,
    ),
    "pgp_block": (
        "RFC 4880 (OpenPGP ASCII armor)",
        "https://www.rfc-editor.org/rfc/rfc4880#section-6.2",
        False,
    ),
    "jwt": ("RFC 7519 (JWT)", "https://www.rfc-editor.org/rfc/rfc7519", False),
    "jwt_unsigned": (
        "RFC 7519 (unsecured JWT, alg none)",
        "https://www.rfc-editor.org/rfc/rfc7519#section-6",
        False,
    ),
}

rules = yaml.safe_load(Path("redaction/rules.yaml").read_text())
rows = []
for rec in rules["recognizers"]:
    for p in rec.get("patterns", []):
        if p["name"] in SOURCES:
            vendor, url, checked = SOURCES[p["name"]]
            rows.append((vendor, p["name"], rec["name"], rec["entity"], url, checked))
missing = [n for n in SOURCES if n not in {r[1] for r in rows}]
assert not missing, missing
out = [
    "# Credential formats the redaction rules recognise (issue 16)",
    "",
    "Generated by `tests/data/redaction/make_formats_doc.py` from `redaction/rules.yaml`. Every",
    "format was written from the vendor's (or the standard's) public documentation of its prefix",
    "and length; *checked* marks the pages whose text was looked up again while writing the rules",
    "in this change, the others are the vendor's documentation page for that credential. A",
    "value in one of these formats that reads as a placeholder (`ghp_xxxx…`, a run of one",
    "character, the example keys vendors print, `your-api-key-here`) is a near-miss, not a",
    "finding.",
    "",
    f"{len(rows)} formats (pattern rows), {len({r[0] for r in rows})} vendors or standards.",
    "",
    "| vendor | pattern | recognizer | entity | source | checked |",
    "|---|---|---|---|---|---|",
]
for vendor, name, rec, entity, url, checked in sorted(rows, key=lambda r: (r[0].lower(), r[1])):
    out.append(f"| {vendor} | `{name}` | `{rec}` | {entity} | {url} | {'yes' if checked else ''} |")
out += [
    "",
    "Formats without a fixed prefix are found through the name they are assigned to",
    "(`keyword_assignment`, `password_assignment`, `cli_user_password`, `http_authorization`,",
    "`http_basic_auth`, `keyword_after_value`) with an entropy check: Datadog API/app keys,",
    "Twilio auth tokens, Heroku's legacy UUID keys, Snyk tokens, Okta tokens, Cloudflare API",
    "tokens, W&B keys outside `WANDB_API_KEY`.",
    "",
]
# ---- PII forms (phones, IPv6, cards): the regions come from the rules' settings -------------
regions = ", ".join(rules["settings"]["phone_regions"])
out += [
    "## PII forms: phone numbers, IP addresses, payment cards",
    "",
    "Measured on `tests/data/redaction/pii-eval-corpus.jsonl` (its README says how it is",
    "built) and gated by `tests/test_redaction_pii_eval.py`.",
    "",
    "| entity | forms | recognizers | source of the format |",
    "|---|---|---|---|",
    "| PHONE_NUMBER | international: `+CC`, E.164, `00 CC`, `00CC`, `011 CC` of any country |"
    " `presidio_phone` (libphonenumber's matcher, regions US, GB, IN) |"
    " ITU-T E.164; libphonenumber metadata |",
    f"| PHONE_NUMBER | national, trunk prefix and separators as the country writes them (spaces,"
    f" dashes, dots, `(area)`, none), regions {regions} (`settings.phone_regions`) |"
    " `phone_national` (one regex of national shapes; each candidate must be"
    " `is_valid_number` in a configured region and its digits those of"
    " `format_number(NATIONAL)`; a bare run without trunk prefix only after a context word"
    " such as phone, tel, call, contact) | national numbering plans as libphonenumber"
    " encodes them |",
    "| IP_ADDRESS | IPv4; IPv6 full, `::` compressed, `::1`, `fe80::`, zone id `%eth0`,"
    " `[addr]:port`, IPv4-mapped and embedded, any case, CIDR |"
    " `presidio_ip`, `nccl_gid_ipv4` | RFC 4291 section 2.2, RFC 5952, RFC 4007 section 11 |",
    "| IP_ADDRESS | IPv6 after an interface name, as NCCL prints it"
    " (`[1]veth0:fe80::...%veth0<0>`) | `ipv6_after_interface` (checked with `ipaddress`) |"
    " NCCL INFO lines in NVIDIA/nccl issue 529 |",
    "| CREDIT_CARD | 13-17 digits (Presidio), Mastercard 2221-2720 | `presidio_credit_card`,"
    " `mastercard_2_series` | ISO/IEC 7812 |",
    "| CREDIT_CARD | 12-digit Maestro (5018, 5020, 5038, 5893, 6304, 6759, 6761-6763),"
    " 13-digit Visa in 4-4-5 groups, 18-19-digit Visa, Maestro, UnionPay (62), Discover"
    " (6011, 644-649, 65), JCB (3528-3589), Mir (2200-2204); plain, spaces or dashes;"
    " Luhn checked |"
    " `payment_card_long` | issuer ranges and lengths of ISO/IEC 7812 as listed on"
    " Wikipedia's Payment card number page |",
    "",
    "Left alone (allow-lists and shapes): GPU/MIG UUIDs, PCI ids, NCCL comm ids, versions",
    "(but not `06.12.34.56.78`, a French number), IPv4 addresses with valid octets (but not",
    "`810.12.34.56`, a Spanish number), whatever follows `::ffff:`, C++/Rust scopes",
    "(`std::vector`, `a::b`), MAC addresses, clock times, ISO dates, counters, quantities with",
    "units and ports.",
    "",
]
Path("docs/redaction-formats.md").write_text("\n".join(out))
print(len(rows))
