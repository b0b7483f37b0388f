#!/usr/bin/env bash
# The Rust guest SDK's ceiling in the hooks bench: what the credit policy would cost the
# pipeline if the SDK read nothing of the event.
#
# Builds two variants of the credit-assessment hook from a staged copy of the SDK that gets a
# hidden entry point handing `on_message` the event's text untouched (no UTF-8 check, no
# parse). Neither is a hook anyone should ship; they bound what any reader of ABI v1's JSON
# event can save:
#   sdk-answer  answers the policy's `set_vars` at once: the SDK's ABI glue and answer path;
#   sdk-fields  first looks up the policy's three fields and runs its test, on the bench
#               event's content and config given by hand (what an index of the event would
#               hand over), then answers as the policy does.
# Then it runs the pipeline bench with each as `compare`, next to `wat-answer` (a hook that
# executes 10 wasm operators) and `rust-reads` (the policy as it ships). Arguments go to the
# bench (e.g. `--rounds 5`).
#
# Needs the toolchains and cargo home of templates/examples/build.sh, and its modules (run it
# first).
set -euo pipefail

root="$(cd "$(dirname "$0")/../../.." && pwd)"
# Debian's cargo, offline against Debian's crates: for the guest builds only.
guest_cargo_home="$root/target/hooks/cargo-home"
if [ ! -f "$guest_cargo_home/config.toml" ]; then
    echo "run templates/examples/build.sh first" >&2
    exit 1
fi
work="${TMPDIR:-/tmp}/colloquy-hook-ceilings"
rm -rf "$work"
mkdir -p "$work"

# build VARIANT: stages the SDK and the policy, patches them, builds VARIANT.wasm.
build() {
    local variant="$1" stage="$work/$1"
    mkdir -p "$stage/templates/examples/credit-assessment"
    cp -r "$root/guest-sdk" "$stage/guest-sdk"
    cp -r "$root/templates/examples/credit-assessment/hook" \
        "$stage/templates/examples/credit-assessment/hook"
    python3 - "$stage" "$variant" <<'PY'
import sys

stage, variant = sys.argv[1], sys.argv[2]

def edit(path, old, new):
    path = f"{stage}/{path}"
    text = open(path).read()
    if old not in text:
        sys.exit(f"hook_ceilings.sh: {path} no longer has the text it patches: {old!r}")
    open(path, "w").write(text.replace(old, new, 1))

# The hidden entry point: `on_message` gets the text before the SDK reads it.
edit("guest-sdk/src/lib.rs", "    /// A deadline passed or a retry came due", """\
    #[doc(hidden)]
    fn on_message_text(&self, text: &str) -> Option<Vec<Action>> {
        let _ = text;
        None
    }

    /// A deadline passed or a retry came due""")
edit("guest-sdk/src/abi.rs", "    let actions = match Event::from_json(input) {", """\
    let text = match kind {
        #[allow(unsafe_code)]
        HookKind::OnMessage => hook.on_message_text(unsafe { std::str::from_utf8_unchecked(input) }),
        _ => None,
    };
    let actions = if let Some(actions) = text { actions } else { match Event::from_json(input) {""")
edit("guest-sdk/src/abi.rs", """        ))],
    };
    if actions.is_empty() {""", """        ))],
    }};
    if actions.is_empty() {""")
edit("guest-sdk/src/json.rs", "    /// The value's JSON text.", """\
    #[doc(hidden)]
    pub fn trusted(text: &'a str) -> RawJson<'a> {
        RawJson(text)
    }

    /// The value's JSON text.""")
edit("guest-sdk/src/json.rs", "pub(crate) fn field_str", "pub fn field_str")
edit("guest-sdk/src/json.rs", "pub(crate) fn field_u64", "pub fn field_u64")

answer = 'Some(vec![Action::set_var("risk_route", "standard")])'
bodies = {
    "sdk-answer": answer,
    "sdk-fields": r'''{
        use colloquy_guest::{json, RawJson};
        let content = RawJson::trusted(r#"{"amount":1200,"purpose":"a new car"}"#);
        let config = RawJson::trusted(r#"{"max_amount":100000}"#);
        let limit = json::field_u64(config, "max_amount").unwrap_or(DEFAULT_MAX_AMOUNT);
        if let Some(amount) = json::field_u64(content, "amount") {
            if amount > limit {
                return Some(vec![Action::reject(format!("amount {amount} exceeds {limit}"))]);
            }
        }
        let purpose = json::field_str(content, "purpose");
        if contains_ignore_ascii_case(purpose.as_deref().unwrap_or(""), "crypto") {
            let agent = json::field_str(config, "special_risk_agent");
            return Some(vec![
                Action::route_to([agent.as_deref().unwrap_or("special-risk-assessment")]),
                Action::set_var("risk_route", "special"),
            ]);
        }
        ''' + answer + '''
    }''',
}
edit("templates/examples/credit-assessment/hook/src/lib.rs",
     "    fn on_timeout(&self, event: &Event<'_>)",
     "    fn on_message_text(&self, _text: &str) -> Option<Vec<Action>> {\n        "
     + bodies[variant] + "\n    }\n\n    fn on_timeout(&self, event: &Event<'_>)")
PY
    # As templates/examples/build.sh builds the policy.
    CARGO_HOME="$guest_cargo_home" RUSTFLAGS="-C target-feature=+bulk-memory" \
    RUSTC=/usr/bin/rustc CARGO_TARGET_DIR="$work/target" /usr/bin/cargo build --quiet --release \
        --lib --target wasm32-unknown-unknown \
        --manifest-path "$stage/templates/examples/credit-assessment/hook/Cargo.toml"
    cp "$work/target/wasm32-unknown-unknown/release/credit_assessment_hook.wasm" \
        "$work/$variant.wasm"
}

for variant in sdk-answer sdk-fields; do
    echo "== $variant"
    build "$variant"
    (cd "$root" && cargo bench --quiet -p colloquy-hooks --bench hooks -- \
        --only wat-answer,rust-reads,compare --compare "$work/$variant.wasm" "$@")
done
