//! The core-module form of a hook (ABI v1): the shape check, and the canonical ABI lowering
//! of `func(string) -> string` written out by hand (allocate the input, call, read
//! `[ptr, len]`, parse the output in place, post-return).

use std::time::Instant;

use colloquy_protocol::hook::{HOOKS_ABI_VERSION, HOST_MODULE, HookOutput, SUPPORTED_ABI_VERSIONS};
use colloquy_protocol::template::HookEvent;
use wasmtime::{ExternType, Memory, Module, Store, TypedFunc, ValType};

use super::host::{HOST_FUNCTIONS, HostState};
use super::module::{EVENT_EXPORTS, Invoke, event_index};
use super::{HookFailure, MAX_OUTPUT_BYTES, event_name};

/// The post-return exports of the three events, in [`event_index`] order.
const POST_EXPORTS: [&str; 3] = ["cabi_post_start", "cabi_post_message", "cabi_post_timeout"];

/// A core instance's typed exports.
pub(super) struct CoreExports {
    memory: Memory,
    realloc: TypedFunc<(i32, i32, i32, i32), i32>,
    version: TypedFunc<(), i32>,
    events: [Option<TypedFunc<(i32, i32), i32>>; 3],
    posts: [Option<TypedFunc<i32, ()>>; 3],
}

impl CoreExports {
    /// The exports of `instance`, for the event exports `events` says the module has (as
    /// [`check_shape`] found them).
    pub(super) fn new(
        store: &mut Store<HostState>,
        instance: &wasmtime::Instance,
        events: [bool; 3],
    ) -> Result<CoreExports, HookFailure> {
        let link = |error: wasmtime::Error| HookFailure::Link(error.to_string());
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or_else(|| HookFailure::Link("no `memory` export".to_owned()))?;
        let realloc = instance
            .get_typed_func(&mut *store, "cabi_realloc")
            .map_err(link)?;
        let version = instance
            .get_typed_func(&mut *store, "hooks_abi_version")
            .map_err(link)?;
        let mut exports = [None, None, None];
        let mut posts = [None, None, None];
        for index in 0..3 {
            if events[index] {
                exports[index] = Some(
                    instance
                        .get_typed_func(&mut *store, EVENT_EXPORTS[index])
                        .map_err(link)?,
                );
                posts[index] = instance
                    .get_typed_func(&mut *store, POST_EXPORTS[index])
                    .ok();
            }
        }
        Ok(CoreExports {
            memory,
            realloc,
            version,
            events: exports,
            posts,
        })
    }

    /// Calls `hooks_abi_version`.
    pub(super) fn version(&self, store: &mut Store<HostState>) -> wasmtime::Result<i32> {
        self.version.call(store, ())
    }

    /// The canonical ABI dance: allocate `input` in guest memory (the guest owns it from
    /// then on), call the export, read `[ptr, len]` at the returned pointer, parse the output
    /// where it lies, then let the guest free it with `cabi_post_<name>`.
    pub(super) fn invoke(
        &self,
        store: &mut Store<HostState>,
        event: HookEvent,
        input: &[u8],
    ) -> Result<Result<HookOutput, HookFailure>, Invoke> {
        let index = event_index(event);
        let func = self.events[index].as_ref().ok_or_else(|| {
            Invoke::Failure(HookFailure::MissingEvent {
                event: event_name(event),
                export: EVENT_EXPORTS[index],
            })
        })?;
        let len = i32::try_from(input.len())
            .map_err(|_| Invoke::Failure(HookFailure::BadOutput("input over 2 GiB".into())))?;
        let ptr = self.realloc.call(&mut *store, (0, 0, 1, len))?;
        self.memory
            .write(&mut *store, ptr as u32 as usize, input)
            .map_err(|_| bad_pointer("cabi_realloc returned a pointer outside memory"))?;
        let retptr = func.call(&mut *store, (ptr, len))?;
        let mut pair = [0u8; 8];
        self.memory
            .read(&*store, retptr as u32 as usize, &mut pair)
            .map_err(|_| bad_pointer("the return pointer is outside memory"))?;
        let out_ptr = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]) as usize;
        let out_len = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]) as usize;
        if out_len > MAX_OUTPUT_BYTES {
            return Err(Invoke::Failure(HookFailure::OutputTooLarge {
                len: out_len as u64,
                max: MAX_OUTPUT_BYTES,
            }));
        }
        // Parsed in guest memory (no copy): the output is owned data, and the guest may
        // reuse the block only after `cabi_post_*`.
        let answer = out_ptr
            .checked_add(out_len)
            .and_then(|end| self.memory.data(&*store).get(out_ptr..end))
            .ok_or_else(|| bad_pointer("the output is outside memory"))?;
        let Some(post) = &self.posts[index] else {
            return Ok(super::output::parse(answer));
        };
        // Reading the answer is the host's time, not the hook's (see `budget`).
        let parsing = Instant::now();
        let output = super::output::parse(answer);
        store.data_mut().budget.exclude(parsing.elapsed());
        post.call(&mut *store, retptr)?;
        Ok(output)
    }
}

fn bad_pointer(what: &str) -> Invoke {
    Invoke::Failure(HookFailure::BadOutput(what.to_owned()))
}

/// Refuses an ABI version this engine does not speak.
pub(super) fn check_version(version: i32) -> Result<(), HookFailure> {
    if version >= 0 && SUPPORTED_ABI_VERSIONS.contains(&(version as u32)) {
        return Ok(());
    }
    Err(HookFailure::AbiVersion {
        found: i64::from(version),
        supported: SUPPORTED_ABI_VERSIONS
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Checks exports and imports against ABI v1; returns which event exports exist.
pub(super) fn check_shape(module: &Module) -> Result<[bool; 3], HookFailure> {
    let i32_ = || ValType::I32;
    let expect_func = |name: &str, params: &[ValType], results: &[ValType]| {
        let Some(ty) = module.get_export(name) else {
            return Err(HookFailure::Link(format!("no `{name}` export")));
        };
        let ExternType::Func(func) = ty else {
            return Err(HookFailure::Link(format!("`{name}` is not a function")));
        };
        let fits = func.params().len() == params.len()
            && func.results().len() == results.len()
            && func.params().zip(params).all(|(a, b)| ValType::eq(&a, b))
            && func.results().zip(results).all(|(a, b)| ValType::eq(&a, b));
        if fits {
            Ok(())
        } else {
            Err(HookFailure::Link(format!(
                "`{name}` has type {func}, expected {}",
                signature(params, results)
            )))
        }
    };
    match module.get_export("memory") {
        Some(ExternType::Memory(memory)) if !memory.is_64() => {}
        Some(ExternType::Memory(_)) => {
            return Err(HookFailure::Link(
                "`memory` is a 64-bit memory; ABI v1 uses a 32-bit one".into(),
            ));
        }
        _ => return Err(HookFailure::Link("no `memory` export".into())),
    }
    expect_func("hooks_abi_version", &[], &[i32_()]).map_err(|failure| match failure {
        HookFailure::Link(detail) => HookFailure::Link(format!(
            "{detail} (a hook module exports `hooks_abi_version: () -> i32` returning \
             {HOOKS_ABI_VERSION})"
        )),
        other => other,
    })?;
    expect_func("cabi_realloc", &[i32_(), i32_(), i32_(), i32_()], &[i32_()])?;
    let mut events = [false; 3];
    for (index, name) in EVENT_EXPORTS.iter().enumerate() {
        if module.get_export(name).is_some() {
            expect_func(name, &[i32_(), i32_()], &[i32_()])?;
            events[index] = true;
            if module.get_export(POST_EXPORTS[index]).is_some() {
                expect_func(POST_EXPORTS[index], &[i32_()], &[])?;
            }
        }
    }
    if events == [false; 3] {
        return Err(HookFailure::Link(
            "it exports none of `start`, `message`, `timeout`".into(),
        ));
    }
    for import in module.imports() {
        if import.module() != HOST_MODULE || !HOST_FUNCTIONS.contains(&import.name()) {
            return Err(HookFailure::Link(format!(
                "it imports `{}::{}`; hooks may import only {} from `{HOST_MODULE}`",
                import.module(),
                import.name(),
                HOST_FUNCTIONS
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )));
        }
    }
    Ok(events)
}

fn signature(params: &[ValType], results: &[ValType]) -> String {
    let list = |types: &[ValType]| {
        types
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("({}) -> ({})", list(params), list(results))
}
