;; Auto-responder: acknowledges every message with an `inform` from the engine party to its
;; sender, saying the desk is closed, and logs it through the host. Hand-written WAT against hook ABI v1
;; (docs/hook-abi.md); it reads nothing from the event but the sender, found by scanning for
;; `"sender":"` (the engine writes compact JSON).
(module
  (import "colloquy:hooks/host@1.0.0" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  ;; 0..1023: static data; 1024..: the bump heap for the input (reset by cabi_post_message).
  (global $heap (mut i32) (i32.const 1024))
  (data (i32.const 0) "\"sender\":\"")                                        ;; 10 bytes
  (data (i32.const 16) "{\"actions\":[{\"send\":{\"performative\":\"inform\",\"to\":[\"") ;; 52
  (data (i32.const 80) "\"],\"content\":{\"auto_reply\":\"the desk is closed; we answer tomorrow\"}}}]}") ;; 72
  (data (i32.const 160) "auto-replied to a query")                              ;; 23
  ;; 256..263: the return area; 512..1023: the output.
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $at i32)
    (local.set $at (global.get $heap))
    (global.set $heap (i32.add (local.get $at) (local.get $size)))
    ;; grow when the input does not fit (the host caps how far)
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.div_u (local.get $size) (i32.const 65536)) (i32.const 1))))))
    (local.get $at))
  ;; offset just after "sender":" in input[ptr..ptr+len], or -1
  (func $find_sender (param $ptr i32) (param $len i32) (result i32)
    (local $i i32) (local $j i32)
    (block $none
      (loop $scan
        (br_if $none (i32.gt_u (i32.add (local.get $i) (i32.const 10)) (local.get $len)))
        (local.set $j (i32.const 0))
        (block $mismatch
          (loop $cmp
            (br_if $mismatch (i32.ne
              (i32.load8_u (i32.add (i32.add (local.get $ptr) (local.get $i)) (local.get $j)))
              (i32.load8_u (local.get $j))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (if (i32.eq (local.get $j) (i32.const 10))
              (then (return (i32.add (local.get $i) (i32.const 10)))))
            (br $cmp)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (i32.const -1))
  (func (export "message") (param $ptr i32) (param $len i32) (result i32)
    (local $at i32) (local $end i32) (local $n i32)
    (local.set $at (call $find_sender (local.get $ptr) (local.get $len)))
    (if (i32.lt_s (local.get $at) (i32.const 0))
      (then
        ;; no sender: answer {}
        (i32.store8 (i32.const 512) (i32.const 123))
        (i32.store8 (i32.const 513) (i32.const 125))
        (i32.store (i32.const 256) (i32.const 512))
        (i32.store (i32.const 260) (i32.const 2))
        (return (i32.const 256))))
    ;; the sender runs to the next quote (agent ids carry no escapes worth handling here)
    (local.set $end (local.get $at))
    (loop $q
      (if (i32.and (i32.lt_u (local.get $end) (local.get $len))
                   (i32.ne (i32.load8_u (i32.add (local.get $ptr) (local.get $end))) (i32.const 34)))
        (then (local.set $end (i32.add (local.get $end) (i32.const 1))) (br $q))))
    (local.set $n (i32.sub (local.get $end) (local.get $at)))
    (if (i32.gt_u (local.get $n) (i32.const 256)) (then (unreachable)))
    (memory.copy (i32.const 512) (i32.const 16) (i32.const 52))
    (memory.copy (i32.const 564) (i32.add (local.get $ptr) (local.get $at)) (local.get $n))
    (memory.copy (i32.add (i32.const 564) (local.get $n)) (i32.const 80) (i32.const 72))
    (call $log (i32.const 1) (i32.const 160) (i32.const 23))
    (i32.store (i32.const 256) (i32.const 512))
    (i32.store (i32.const 260) (i32.add (i32.const 124) (local.get $n)))
    (i32.const 256))
  (func (export "cabi_post_message") (param i32)
    (global.set $heap (i32.const 1024))))
