//! Credit assessment policy (the hook of `credit-assessment.yaml`).
//!
//! - `on_start`: the application is `pending`, stamped with its start time.
//! - `on_message`: a loan request above `config.max_amount` is refused; one whose purpose
//!   mentions crypto is also routed to `config.special_risk_agent`.
//! - `on_timeout`: while the assessor has not answered, retry after 1 s, 2 s, 4 s; after the
//!   third retry, escalate to `config.escalation_agent` with the reason.

use colloquy_guest::{host, Action, Event, Hook, LogLevel};

/// Retries before escalating.
const MAX_RETRIES: u32 = 3;
/// First retry delay; each further one doubles.
const FIRST_RETRY_MS: u64 = 1_000;
/// Used when the template's config has no `max_amount`.
const DEFAULT_MAX_AMOUNT: u64 = 50_000;
/// The thread state in which the assessor owes an answer.
const AWAITING: &str = "assessing";

/// The policy. Stateless: everything it remembers is in the conversation's vars.
#[derive(Default)]
pub struct CreditPolicy;

impl Hook for CreditPolicy {
    fn on_start(&self, event: &Event<'_>) -> Vec<Action> {
        let mut vars = colloquy_guest::Map::new();
        vars.insert("status".into(), "pending".into());
        vars.insert("started_at".into(), event.now.into());
        vec![Action::SetVars(vars)]
    }

    fn on_message(&self, event: &Event<'_>) -> Vec<Action> {
        let message = match &event.message {
            Some(message) => message,
            None => return Vec::new(),
        };
        match &*message.performative {
            "request" => assess_request(event),
            "inform" => vec![Action::set_var("status", "assessed")],
            "refuse" | "failure" => vec![Action::set_var("status", "declined")],
            _ => Vec::new(),
        }
    }

    fn on_timeout(&self, event: &Event<'_>) -> Vec<Action> {
        let timeout = match &event.timeout {
            Some(timeout) => timeout,
            None => return Vec::new(),
        };
        let still_waiting = event
            .conversation
            .threads
            .iter()
            .any(|thread| thread.state == AWAITING);
        if !still_waiting || timeout.kind == "conversation" {
            return Vec::new();
        }
        let retries_done = if timeout.kind == "retry" {
            timeout.attempt
        } else {
            event.conversation.retry_attempts
        };
        if retries_done < MAX_RETRIES {
            host::log(
                LogLevel::Info,
                &format!(
                    "no assessment yet; retry {} of {MAX_RETRIES}",
                    retries_done + 1
                ),
            );
            return vec![Action::retry(FIRST_RETRY_MS, 2.0, MAX_RETRIES)];
        }
        let agent = event.config_str("escalation_agent");
        vec![
            Action::set_var("status", "escalated"),
            Action::escalate(
                agent.as_deref().unwrap_or("human-review"),
                format!("max_retries_exceeded: no assessment after {MAX_RETRIES} retries"),
            ),
        ]
    }
}

fn assess_request(event: &Event<'_>) -> Vec<Action> {
    let limit = event.config_u64("max_amount").unwrap_or(DEFAULT_MAX_AMOUNT);
    if let Some(amount) = event.content_u64("amount") {
        if amount > limit {
            return vec![Action::reject(format!(
                "amount {amount} exceeds the limit of {limit}"
            ))];
        }
    }
    // Each accessor reads one field of the raw content or config; nothing else is parsed.
    let purpose = event.content_str("purpose");
    if contains_ignore_ascii_case(purpose.as_deref().unwrap_or(""), "crypto") {
        let agent = event.config_str("special_risk_agent");
        return vec![
            Action::route_to([agent.as_deref().unwrap_or("special-risk-assessment")]),
            Action::set_var("risk_route", "special"),
        ];
    }
    vec![Action::set_var("risk_route", "standard")]
}

/// Whether `haystack` contains `needle`, ignoring ASCII case (no lowercased copy).
fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    let (haystack, needle) = (haystack.as_bytes(), needle.as_bytes());
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window.eq_ignore_ascii_case(needle))
}

colloquy_guest::export_hook!(CreditPolicy);

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_guest::json;

    /// The event's JSON text (an [`Event`] borrows from it).
    fn event(
        hook: &str,
        message: Option<colloquy_guest::Value>,
        timeout: Option<colloquy_guest::Value>,
    ) -> String {
        let mut value = json!({
            "abi_version": 1, "hook": hook, "now": 1000,
            "conversation": {"id": "c", "template": "credit-assessment", "revision": "r",
                "status": "active", "initiator": "desk", "participants": ["risk"],
                "threads": [{"participant": "risk", "state": "assessing"}],
                "vars": {}, "parameters": {}, "context": {}, "retry_attempts": 0},
            "config": {"max_amount": 100}
        });
        if let Some(message) = message {
            value["message"] = message;
        }
        if let Some(timeout) = timeout {
            value["timeout"] = timeout;
        }
        value.to_string()
    }

    fn on_message(text: &str) -> Vec<Action> {
        CreditPolicy.on_message(&Event::from_json(text.as_bytes()).expect("event"))
    }

    fn on_timeout(text: &str) -> Vec<Action> {
        CreditPolicy.on_timeout(&Event::from_json(text.as_bytes()).expect("event"))
    }

    #[test]
    fn refuses_over_the_limit_and_routes_crypto() {
        let request = |amount: u64, purpose: &str| {
            Some(
                json!({"id": "m", "performative": "request", "sender": "desk",
                "receivers": ["risk"], "content": {"amount": amount, "purpose": purpose}}),
            )
        };
        let big = on_message(&event("on_message", request(500, "car"), None));
        assert!(matches!(&big[..], [Action::Reject { .. }]));
        let crypto = on_message(&event("on_message", request(50, "Crypto mining"), None));
        assert_eq!(crypto[0], Action::route_to(["special-risk-assessment"]));
        let shouting = on_message(&event("on_message", request(50, "CRYPTO\n"), None));
        assert_eq!(shouting[0], Action::route_to(["special-risk-assessment"]));
        let car = on_message(&event("on_message", request(50, "a new car"), None));
        assert_eq!(car, vec![Action::set_var("risk_route", "standard")]);
    }

    #[test]
    fn retries_three_times_then_escalates() {
        let retry = |attempt: u32| Some(json!({"kind": "retry", "attempt": attempt}));
        assert_eq!(
            on_timeout(&event("on_timeout", None, retry(2))),
            vec![Action::retry(1000, 2.0, 3)]
        );
        let last = on_timeout(&event("on_timeout", None, retry(3)));
        assert!(matches!(&last[1], Action::Escalate { to, .. } if to == "human-review"));
    }
}
