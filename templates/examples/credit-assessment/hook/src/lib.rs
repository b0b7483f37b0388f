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
    fn on_start(&self, event: &Event) -> Vec<Action> {
        let mut vars = colloquy_guest::Map::new();
        vars.insert("status".into(), "pending".into());
        vars.insert("started_at".into(), event.now.into());
        vec![Action::SetVars(vars)]
    }

    fn on_message(&self, event: &Event) -> Vec<Action> {
        let message = match &event.message {
            Some(message) => message,
            None => return Vec::new(),
        };
        match message.performative.as_str() {
            "request" => assess_request(event),
            "inform" => vec![Action::set_var("status", "assessed")],
            "refuse" | "failure" => vec![Action::set_var("status", "declined")],
            _ => Vec::new(),
        }
    }

    fn on_timeout(&self, event: &Event) -> Vec<Action> {
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
        let agent = event
            .config_str("escalation_agent")
            .unwrap_or("human-review");
        vec![
            Action::set_var("status", "escalated"),
            Action::escalate(
                agent,
                format!("max_retries_exceeded: no assessment after {MAX_RETRIES} retries"),
            ),
        ]
    }
}

fn assess_request(event: &Event) -> Vec<Action> {
    let limit = event.config_u64("max_amount").unwrap_or(DEFAULT_MAX_AMOUNT);
    if let Some(amount) = event.content_u64("amount") {
        if amount > limit {
            return vec![Action::reject(format!(
                "amount {amount} exceeds the limit of {limit}"
            ))];
        }
    }
    let purpose = event.content_str("purpose").unwrap_or("").to_lowercase();
    if purpose.contains("crypto") {
        let agent = event
            .config_str("special_risk_agent")
            .unwrap_or("special-risk-assessment");
        return vec![
            Action::route_to([agent]),
            Action::set_var("risk_route", "special"),
        ];
    }
    vec![Action::set_var("risk_route", "standard")]
}

colloquy_guest::export_hook!(CreditPolicy);

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_guest::json;

    fn event(
        hook: &str,
        message: Option<colloquy_guest::Value>,
        timeout: Option<colloquy_guest::Value>,
    ) -> Event {
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
        colloquy_guest::Event::from_json(value.to_string().as_bytes()).expect("event")
    }

    #[test]
    fn refuses_over_the_limit_and_routes_crypto() {
        let request = |amount: u64, purpose: &str| {
            Some(
                json!({"id": "m", "performative": "request", "sender": "desk",
                "receivers": ["risk"], "content": {"amount": amount, "purpose": purpose}}),
            )
        };
        let big = CreditPolicy.on_message(&event("on_message", request(500, "car"), None));
        assert!(matches!(&big[..], [Action::Reject { .. }]));
        let crypto =
            CreditPolicy.on_message(&event("on_message", request(50, "Crypto mining"), None));
        assert_eq!(crypto[0], Action::route_to(["special-risk-assessment"]));
    }

    #[test]
    fn retries_three_times_then_escalates() {
        let retry = |attempt: u32| Some(json!({"kind": "retry", "attempt": attempt}));
        assert_eq!(
            CreditPolicy.on_timeout(&event("on_timeout", None, retry(2))),
            vec![Action::retry(1000, 2.0, 3)]
        );
        let last = CreditPolicy.on_timeout(&event("on_timeout", None, retry(3)));
        assert!(matches!(&last[1], Action::Escalate { to, .. } if to == "human-review"));
    }
}
