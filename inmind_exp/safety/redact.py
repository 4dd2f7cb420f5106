"""Redaction of secrets from everything the tool writes: configs, override lists, command lines and log lines.

A value is secret when its key *looks* secret (a word ``key``, ``token``, ``password``, ``secret``... in the key's
name, ``api_key``, ``OPENAI_API_KEY``, ``access_token``; but ``*_env`` keys hold variable *names* and ``max_tokens``
holds a count) or when it contains the value of a key variable: one named by an ``api_key_env`` / ``*_api_key_env``
key of the config, one of the common provider variables present in the environment (``KEY_VARIABLES``), or a key
this process has used (``remember``, called wherever a key is read). Whatever the source, the user-info of a URL
(``http://user:password@host/v1``), the value of a secret-looking query parameter (``?token=...``) and text shaped
like a provider key (``sk-...``, ``Bearer ...``) are redacted too:
an endpoint that echoes a key in its error body ("Incorrect API key provided: sk-...") cannot put it on disk.

``scrub`` (text) and ``scrub_obj`` (a JSON-like value) are the one entry point for everything else the tool stores
or prints: error messages, records, ledgers, MLflow params, tags and artifacts, and log lines. ``visible`` shows the
control characters of what is printed or logged as escapes.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Iterable, Mapping

REDACTED = "***"
#: Words that make a key name secret (matched against the words of the name, split at ``_ - .`` and case changes).
SECRET_WORDS = frozenset({"key", "apikey", "token", "password", "passwd", "pwd", "secret", "credential",
                          "credentials", "bearer", "authorization", "auth"})
#: Environment variables that commonly hold keys: their values are redacted wherever they appear.
KEY_VARIABLES = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                 "MISTRAL_API_KEY", "TOGETHER_API_KEY", "GROQ_API_KEY", "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY",
                 "FIREWORKS_API_KEY", "COHERE_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                 "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "AWS_SECRET_ACCESS_KEY", "INMIND_API_KEY")
#: Shorter values are only redacted where they are a whole value, never as a substring (too many false hits).
MIN_SUBSTRING_LEN = 8

_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
#: ``scheme://user:password@`` (or ``scheme://token@``, or Hydra's escaped ``http\\://u\\:p@``): the user-info of a URL is a credential
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*\\?:(?:\\?/){2})[^\s/@?#'\"]+@")  # Hydra writes \: too
#: text shaped like a key, whether or not this process knows it: OpenAI-style ``sk-...`` keys and bearer tokens
_KEY_SHAPES = (re.compile(r"\bsk-[A-Za-z0-9_\-*]{12,}"), re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{12,}"))
#: a query parameter (``?token=...``, ``&X-Amz-Signature=...``): its value is redacted when its name looks secret
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.\-]+)=([^&#\s'\"]+)")
#: words that make a query parameter's name secret beyond ``SECRET_WORDS`` (signed URLs)
QUERY_WORDS = frozenset({"sig", "signature", "code"})
#: keys this process has read (``Endpoint.api_key``, the workers' ``ApiKeys``): redacted wherever they appear
_KNOWN: set[str] = set()


def is_secret_key(name: Any) -> bool:
    """Whether a config key (or an override's last key component) names a secret value."""
    if not isinstance(name, str):
        return False
    leaf = name.lstrip("+~").rsplit(".", 1)[-1]
    if leaf.lower().endswith("_env"):
        return False
    words = {w.lower() for part in re.split(r"[_\-.\s]+", leaf) for w in _WORD.findall(part)}
    return bool(words & SECRET_WORDS) or "apikey" in leaf.lower()


def env_key_names(container: Any) -> set[str]:
    """The variable names under every ``api_key_env`` / ``*_api_key_env`` key of a config container."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if isinstance(k, str) and (k == "api_key_env" or k.endswith("_api_key_env")) and isinstance(v, str) and v:
                    names.add(v)
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    walk(container)
    return names


def secret_values(container: Any = None, environ: Mapping[str, str] | None = None,
                  extra: Iterable[str] = ()) -> set[str]:
    """Values to redact wherever they appear: those of the variables the config names and of ``KEY_VARIABLES``,
    the values under secret-looking keys of ``container``, and ``extra``."""
    env = os.environ if environ is None else environ
    values = {env[n] for n in (env_key_names(container) | set(KEY_VARIABLES)) if env.get(n)}

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if is_secret_key(k) and isinstance(v, (str, int)) and not isinstance(v, bool) and str(v):
                    values.add(str(v))
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    walk(container)
    values.update(v for v in extra if v)
    values.update(_KNOWN)
    return {v for v in values if v != REDACTED}


def remember(values: Iterable[str]) -> None:
    """Keys this process uses: from now on ``scrub`` redacts them wherever they appear."""
    _KNOWN.update(v for v in values if v and v != REDACTED and len(v) >= MIN_SUBSTRING_LEN)


def strip_userinfo(text: str) -> str:
    """``text`` with the user-info of every URL in it replaced: ``http://u:p@host`` -> ``http://***@host``."""
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text) if "@" in text else text


def strip_secret_query(text: str) -> str:
    """``text`` with the value of every URL query parameter whose name looks secret replaced: ``?token=abc`` ->
    ``?token=***`` (``is_secret_key``, or a name of ``QUERY_WORDS``)."""
    if "=" not in text or ("?" not in text and "&" not in text):
        return text

    def one(m: re.Match[str]) -> str:
        name = m.group(2)
        secret = is_secret_key(name) or bool({w.lower() for w in re.split(r"[_\-.]+", name)} & QUERY_WORDS)
        return f"{m.group(1)}{name}={REDACTED}" if secret and m.group(3) != REDACTED else m.group(0)

    return _QUERY_PARAM.sub(one, text)


def without_userinfo(url: str) -> str:
    """A URL with no user-info at all (``http://u:p@host/v1`` -> ``http://host/v1``): what names the server."""
    return _URL_USERINFO.sub(lambda m: m.group(1), url) if "@" in url else url


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (of at least ``MIN_SUBSTRING_LEN`` characters) replaced by ``***``; a shorter
    secret only when it is the whole text. URL user-info, secret query values and key-shaped text are replaced too."""
    for s in sorted(set(secrets), key=len, reverse=True):
        if text == s:
            return REDACTED
        if len(s) >= MIN_SUBSTRING_LEN and s in text:
            text = text.replace(s, REDACTED)
    text = strip_secret_query(strip_userinfo(text))
    for shape in _KEY_SHAPES:
        if shape.search(text):
            text = shape.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    return text


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """The one redaction applied to anything stored or printed: every key this process knows (``remember``, the
    key variables of the environment, ``extra``), URL user-info and key-shaped text, replaced by ``***``."""
    if not text:
        return text
    return redact_text(text, secret_values(None, extra=extra))


def scrub_obj(node: Any, extra: Iterable[str] = ()) -> Any:
    """``scrub`` applied to every string (keys included) of a JSON-like value; other values unchanged."""
    secrets = secret_values(None, extra=extra)

    def walk(n: Any) -> Any:
        if isinstance(n, str):
            return redact_text(n, secrets) if n else n
        if isinstance(n, Mapping):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in n.items()}
        if isinstance(n, (list, tuple)):
            return type(n)(walk(v) for v in n)
        return n

    return walk(node)


#: control characters a terminal acts on (all but newline and tab; C1 controls; bidirectional overrides)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as its escape (``\\x1b``, ``\\r``): what
    an endpoint's error body or a data file holds is shown, never acted on by the terminal (clear screen, retitle,
    fake colours). Applied to every log line (the record factory below) and every error printed."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text) if text else text


def redact(container: Any, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> Any:
    """A copy of a plain config container (dicts, lists, scalars) with secret values replaced by ``***``: values
    under secret-looking keys, and any string containing a secret value (see ``secret_values``)."""
    secrets = secret_values(container, environ, extra)

    def walk(node: Any, key: Any = None) -> Any:
        if is_secret_key(key) and node is not None and not isinstance(node, (Mapping, list, tuple, bool)):
            return REDACTED
        if isinstance(node, Mapping):
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(walk(v) for v in node)
        if isinstance(node, str):
            return redact_text(node, secrets)
        return node

    return walk(container)


def redact_overrides(overrides: Iterable[str], environ: Mapping[str, str] | None = None,
                     extra: Iterable[str] = ()) -> list[str]:
    """Hydra overrides (or any argv) with secrets removed: ``key=value`` with a secret-looking key becomes
    ``key=***``; a secret value (from the environment, or given under a secret key elsewhere in the list) is
    replaced wherever it appears."""
    items = list(overrides)
    found = set(extra)
    for o in items:
        key, eq, value = o.partition("=")
        if eq and is_secret_key(key) and value:
            found.update({value, *value.split(",")})
    secrets = secret_values(None, environ, found)
    out = []
    for o in items:
        key, eq, value = o.partition("=")
        if eq and is_secret_key(key):
            out.append(f"{key}={REDACTED}" if value else o)
        else:
            out.append(redact_text(o, secrets))
    return out


class _RedactingRecords:
    """A LogRecord factory that redacts secrets in every record's message (Hydra logs each job's overrides) and
    shows its control characters as escapes (``visible``: an endpoint's error text reaches log lines)."""

    def __init__(self, previous: Any, secrets: set[str]):
        self.previous, self.secrets = previous, secrets

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's business
            return record
        cleaned = visible(scrub(message, self.secrets))  # keys read since, URL user-info, key shapes; escapes
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return record


def install_log_redaction(secrets: set[str]) -> None:
    """Redact ``secrets`` from every log record created from now on in this process (idempotent, cumulative)."""
    factory = logging.getLogRecordFactory()
    if isinstance(factory, _RedactingRecords):
        factory.secrets |= secrets
    else:
        logging.setLogRecordFactory(_RedactingRecords(factory, set(secrets)))
