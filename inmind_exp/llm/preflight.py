"""Check every role's endpoint before a sweep starts: the key is in the environment and the server answers, within
the endpoint's deadline and size cap like every other call (``inmind_exp.llm.deadline``)."""

from __future__ import annotations

import openai

from inmind_exp.llm.deadline import call_limits
from inmind_exp.llm.endpoint import Endpoint, EndpointError
from inmind_exp.llm.provider import shared_client
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
    """One request to ``base_url``'s ``/models``, ended by ``timeout_s`` per read and ``ep.deadline_s`` in all (an
    endpoint dripping a byte a second held the launch for ever); ``EndpointError`` when it fails (unredacted: the
    caller scrubs)."""
    who = f"role(s) {', '.join(roles)}"
    client = shared_client(base_url, ep.api_key(), timeout_s)
    try:
        with call_limits(ep.deadline_s, ep.max_response_bytes):
            client.models.list()
    except openai.AuthenticationError as e:
        raise EndpointError(f"{who}: {base_url} rejected the key in {ep.api_key_env}: {e}") from None
    except openai.APITimeoutError:
        raise EndpointError(f"{who}: {base_url} did not answer /models in time (llm.timeout_s={timeout_s} per read, "
                            f"llm.deadline_s={ep.deadline_s} in all)") from None
    except openai.APIConnectionError as e:
        raise EndpointError(f"{who}: cannot reach {base_url} ({type(e).__name__})") from None
    except openai.NotFoundError:
        pass  # some compatible servers do not implement /models; reachable is enough
    except openai.APIStatusError as e:
        raise EndpointError(f"{who}: {base_url} answered HTTP {e.status_code} to /models") from None
    except openai.OpenAIError as e:  # a reply over llm.max_response_bytes, or one the client cannot read
        raise EndpointError(f"{who}: {base_url} gave no usable answer to /models: {e}") from None
