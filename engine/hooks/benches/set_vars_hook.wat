;; A benchmark hook of the `hooks` benchmark: answers every message with the credit policy's
;; usual answer, `set_vars {"risk_route": "standard"}`, without reading the event. What it
;; costs is the least any hook with that answer costs: the ABI round trip, the answer read
;; by the engine and applied. Assembled by templates/examples/build.sh (wabt) into
;; target/hooks/set_vars_hook.wasm.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"actions\":[{\"set_vars\":{\"risk_route\":\"standard\"}}]}")
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  ;; One block at a time: the host allocates only the input.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
  (func (export "message") (param i32 i32) (result i32)
    (i32.store (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const 52))
    (i32.const 2048)))
