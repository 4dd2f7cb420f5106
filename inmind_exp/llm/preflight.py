"""Check every role's endpoint before a sweep starts: the key is in the environment and the server answers."""

from __future__ import annotations

import openai

from inmind_exp.llm.endpoint import Endpoint, EndpointError
from inmind_exp.safety.redact import scrub


def check_endpoints(endpoints: list[Endpoint], timeout_s: float = 15.0) -> None:
    """Raise ``EndpointError`` naming the role(s) and endpoint that fail; one request per distinct server."""
    seen: dict[tuple[str, str | None], list[str]] = {}
    for ep in endpoints:
        if not ep.base_url:
            raise EndpointError(f"role '{ep.role}': no base_url configured (set llm.base_url or llm.roles.{ep.role}.base_url)")
        ep.api_key()  # raises with the role and variable name when the key is missing
        seen.setdefault((ep.base_url, ep.api_key_env), []).append(ep.role)
    for (base_url, _), roles in seen.items():
        ep = next(e for e in endpoints if e.base_url == base_url)
        try:
            _check_one(ep, base_url, roles, timeout_s)
        except EndpointError as e:  # the server's reply may echo the key; the URL may hold a password
            raise EndpointError(scrub(str(e))) from None


def _check_one(ep: Endpoint, base_url: str, roles: list[str], timeout_s: float) -> None:
    """One request to ``base_url``'s ``/models``; ``EndpointError`` when it fails (unredacted: the caller scrubs)."""
    client = openai.OpenAI(base_url=base_url, api_key=ep.api_key(), max_retries=0, timeout=timeout_s)
    try:
        client.models.list()
    except openai.AuthenticationError as e:
        raise EndpointError(f"role(s) {', '.join(roles)}: {base_url} rejected the key in {ep.api_key_env}: {e}") from None
    except (openai.APIConnectionError, openai.APITimeoutError) as e:
        raise EndpointError(f"role(s) {', '.join(roles)}: cannot reach {base_url} ({type(e).__name__})") from None
    except openai.NotFoundError:
        pass  # some compatible servers do not implement /models; reachable is enough
    except openai.APIStatusError as e:
        raise EndpointError(f"role(s) {', '.join(roles)}: {base_url} answered HTTP {e.status_code} to /models") from None
