//! The component form of a hook: a component of the world `colloquy:hooks@1.0.0`
//! (`guest-sdk/wit/hooks.wit`), as componentize-py (Python) and componentize-qjs
//! (JavaScript) build them. wasmtime lifts and lowers the strings; this module checks the
//! component's imports and exports against the world before anything runs, and makes the
//! call. No WASI is linked: a hook reaches the outside only through `log` and `now-ms`.

use colloquy_protocol::hook::{HOST_MODULE, HookOutput};
use colloquy_protocol::template::HookEvent;
use wasmtime::Store;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex, Func, Type};

use super::host::{HOST_FUNCTIONS, HostState};
use super::module::{EVENT_EXPORTS, Invoke, event_index};
use super::{HookFailure, MAX_OUTPUT_BYTES, event_name};

/// How to build a component without WASI imports, for the refusal's message.
const NO_WASI_HINT: &str = "WASI imports come from building without WASI stubs: build Python \
     hooks with `componentize-py ... componentize --stub-wasi` and JavaScript hooks with \
     `componentize-qjs --stub-wasi --sync` (guest-sdk/python/build.sh and guest-sdk/js/build.sh \
     do)";

/// Where a component's event exports are, found once at load.
pub(super) type ExportIndices = [Option<ComponentExportIndex>; 3];

/// Checks a component's imports and exports against the hooks world; returns where its
/// event exports are (at least one exists).
pub(super) fn check_world(
    engine: &wasmtime::Engine,
    component: &Component,
) -> Result<ExportIndices, HookFailure> {
    let ty = component.component_type();
    for (name, item) in ty.imports(engine) {
        let allowed = name == HOST_MODULE
            && match &item.ty {
                // Its functions and the types they use (`log-level`).
                ComponentItem::ComponentInstance(host) => {
                    host.exports(engine).all(|(name, item)| match item.ty {
                        ComponentItem::ComponentFunc(_) => HOST_FUNCTIONS.contains(&name),
                        ComponentItem::Type(_) => true,
                        _ => false,
                    })
                }
                _ => false,
            };
        if !allowed {
            return Err(foreign_import(name));
        }
    }
    let mut indices = [None, None, None];
    for (index, name) in EVENT_EXPORTS.iter().enumerate() {
        let Some(item) = ty.get_export(engine, name) else {
            continue;
        };
        match item.ty {
            ComponentItem::ComponentFunc(func) if takes_and_returns_a_string(&func) => {}
            other => {
                return Err(HookFailure::World(format!(
                    "its `{name}` is {}, expected `func(event: string) -> string`",
                    describe(&other)
                )));
            }
        }
        indices[index] = component.get_export_index(None, name);
    }
    if indices.iter().all(Option::is_none) {
        return Err(no_event_export());
    }
    Ok(indices)
}

/// The component imports `name`, which the hooks world does not offer.
fn foreign_import(name: &str) -> HookFailure {
    let hint = if name.starts_with("wasi:") {
        format!("; {NO_WASI_HINT}")
    } else {
        String::new()
    };
    HookFailure::World(format!(
        "it imports `{name}`; hook components import only `{HOST_MODULE}` (`log`, `now-ms`){hint}"
    ))
}

/// The component exports none of the world's functions.
fn no_event_export() -> HookFailure {
    HookFailure::World(
        "it exports none of `start`, `message`, `timeout`: is it built for another world? \
         (the hooks world is guest-sdk/wit/hooks.wit)"
            .into(),
    )
}
/// Reads a component's top-level imports and exports without compiling it, and refuses the
/// shapes [`check_world`] would refuse after compiling: a foreign import (WASI), none of the
/// event exports, bytes that do not parse (a truncated file). Milliseconds, against seconds
/// of compiling a Python component: the usual mistakes are answered at once (a reload or an
/// upload reports them synchronously), and nothing is compiled for a file that cannot load.
pub(super) fn precheck(bytes: &[u8]) -> Result<(), HookFailure> {
    use wasmparser::{Parser, Payload};
    let malformed = |error: wasmparser::BinaryReaderError| HookFailure::Compile(format!("{error}"));
    let mut events = [false; 3];
    // Nested modules and components start with their own `Version` and end with `End`; only
    // the outermost component's imports and exports are the world's.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(malformed)? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(imports) if depth == 1 => {
                for import in imports {
                    let name = import.map_err(malformed)?.name.name;
                    if name != HOST_MODULE {
                        return Err(foreign_import(name));
                    }
                }
            }
            Payload::ComponentExportSection(exports) if depth == 1 => {
                for export in exports {
                    let name = export.map_err(malformed)?.name.name;
                    if let Some(index) = EVENT_EXPORTS.iter().position(|event| *event == name) {
                        events[index] = true;
                    }
                }
            }
            _ => {}
        }
    }
    if events == [false; 3] {
        return Err(no_event_export());
    }
    Ok(())
}

fn takes_and_returns_a_string(func: &ComponentFunc) -> bool {
    let params: Vec<Type> = func.params().map(|(_, ty)| ty).collect();
    let results: Vec<Type> = func.results().collect();
    !func.async_()
        && matches!(&params[..], [Type::String])
        && matches!(&results[..], [Type::String])
}

fn describe(item: &ComponentItem) -> String {
    match item {
        ComponentItem::ComponentFunc(func) => {
            let params: Vec<String> = func
                .params()
                .map(|(name, ty)| format!("{name}: {ty:?}"))
                .collect();
            let results: Vec<String> = func.results().map(|ty| format!("{ty:?}")).collect();
            let asynchronous = if func.async_() { "async " } else { "" };
            format!(
                "`{asynchronous}func({}) -> ({})`",
                params.join(", "),
                results.join(", ")
            )
        }
        ComponentItem::ComponentInstance(_) => "an instance".into(),
        ComponentItem::Component(_) => "a component".into(),
        ComponentItem::Module(_) => "a core module".into(),
        ComponentItem::CoreFunc(_) => "a core function".into(),
        ComponentItem::Type(_) => "a type".into(),
        ComponentItem::Resource(_) => "a resource".into(),
    }
}

/// A component instance's event functions.
pub(super) struct ComponentExports {
    funcs: [Option<Func>; 3],
}

impl ComponentExports {
    /// The event functions of `instance`, at the indices [`check_world`] found.
    pub(super) fn new(
        store: &mut Store<HostState>,
        instance: &wasmtime::component::Instance,
        indices: &ExportIndices,
    ) -> Result<ComponentExports, HookFailure> {
        let mut funcs = [None, None, None];
        for (index, export) in indices.iter().enumerate() {
            if let Some(export) = export {
                funcs[index] = Some(instance.get_func(&mut *store, export).ok_or_else(|| {
                    HookFailure::Link(format!("no `{}` export", EVENT_EXPORTS[index]))
                })?);
            }
        }
        Ok(ComponentExports { funcs })
    }

    /// Calls the event's export with `input` (the event's JSON) and parses the answer.
    pub(super) fn invoke(
        &self,
        store: &mut Store<HostState>,
        event: HookEvent,
        input: &[u8],
    ) -> Result<Result<HookOutput, HookFailure>, Invoke> {
        let index = event_index(event);
        let func = self.funcs[index].as_ref().ok_or_else(|| {
            Invoke::Failure(HookFailure::MissingEvent {
                event: event_name(event),
                export: EVENT_EXPORTS[index],
            })
        })?;
        let input = std::str::from_utf8(input).map_err(|_| {
            Invoke::Failure(HookFailure::BadOutput("the input is not UTF-8".into()))
        })?;
        // The type was checked at load; this is a cheap comparison of two known types.
        let typed = func
            .typed::<(&str,), (String,)>(&*store)
            .map_err(|error| Invoke::Failure(HookFailure::Link(error.to_string())))?;
        let (answer,) = typed.call(&mut *store, (input,))?;
        if answer.len() > MAX_OUTPUT_BYTES {
            return Err(Invoke::Failure(HookFailure::OutputTooLarge {
                len: answer.len() as u64,
                max: MAX_OUTPUT_BYTES,
            }));
        }
        Ok(super::output::parse(answer.as_bytes()))
    }
}
