"""Credit assessment policy (the hook of ``credit-assessment-py.yaml``), in Python.

The same policy as the Rust hook (``../hook/src/lib.rs``), decision for decision:

- ``on_start``: the application is ``pending``, stamped with its start time.
- ``on_message``: a loan request above ``config.max_amount`` is refused; one whose purpose
  mentions crypto is also routed to ``config.special_risk_agent``.
- ``on_timeout``: while the assessor has not answered, retry after 1 s, 2 s, 4 s; after the
  third retry, escalate to ``config.escalation_agent`` with the reason.

Built by ``guest-sdk/python/build.sh`` (``guest-sdk/python/build-examples.sh`` builds it to
``../credit_assessment_py.wasm``).
"""

from __future__ import annotations

from colloquy_hook import Action, Event, Hook, export, log

#: Retries before escalating.
MAX_RETRIES = 3
#: First retry delay; each further one doubles.
FIRST_RETRY_MS = 1_000
#: Used when the template's config has no ``max_amount``.
DEFAULT_MAX_AMOUNT = 50_000
#: The thread state in which the assessor owes an answer.
AWAITING = "assessing"


class CreditPolicy(Hook):
    """The policy. Stateless: everything it remembers is in the conversation's vars."""

    def on_start(self, event: Event) -> list[Action]:
        return [Action.set_vars({"status": "pending", "started_at": event.now})]

    def on_message(self, event: Event) -> list[Action]:
        message = event.message
        if message is None:
            return []
        if message.performative == "request":
            return assess_request(event)
        if message.performative == "inform":
            return [Action.set_var("status", "assessed")]
        if message.performative in ("refuse", "failure"):
            return [Action.set_var("status", "declined")]
        return []

    def on_timeout(self, event: Event) -> list[Action]:
        timeout = event.timeout
        if timeout is None:
            return []
        still_waiting = any(thread.state == AWAITING for thread in event.conversation.threads)
        if not still_waiting or timeout.kind == "conversation":
            return []
        retries_done = (timeout.attempt if timeout.kind == "retry"
                        else event.conversation.retry_attempts)
        if retries_done < MAX_RETRIES:
            log("info", f"no assessment yet; retry {retries_done + 1} of {MAX_RETRIES}")
            return [Action.retry(FIRST_RETRY_MS, 2.0, MAX_RETRIES)]
        agent = event.config_str("escalation_agent")
        return [
            Action.set_var("status", "escalated"),
            Action.escalate(
                agent if agent is not None else "human-review",
                f"max_retries_exceeded: no assessment after {MAX_RETRIES} retries",
            ),
        ]


def assess_request(event: Event) -> list[Action]:
    """A loan request: over the limit, refused; about crypto, routed to special risk too."""
    limit = event.config_uint("max_amount")
    if limit is None:
        limit = DEFAULT_MAX_AMOUNT
    # As the Rust SDK's `content_u64`: a fraction is truncated, a negative amount ignored.
    amount = event.content_uint("amount")
    if amount is not None and amount > limit:
        return [Action.reject(f"amount {amount} exceeds the limit of {limit}")]
    if mentions_crypto(event.content_str("purpose") or ""):
        agent = event.config_str("special_risk_agent")
        return [
            Action.route_to([agent if agent is not None else "special-risk-assessment"]),
            Action.set_var("risk_route", "special"),
        ]
    return [Action.set_var("risk_route", "standard")]


def mentions_crypto(purpose: str) -> bool:
    """Whether ``purpose`` contains "crypto", ignoring ASCII case only (as the Rust policy:
    ``bytes.lower`` leaves non-ASCII letters alone, where ``str.lower`` would not)."""
    return b"crypto" in purpose.encode("utf-8").lower()


WitWorld = export(CreditPolicy)
