;; Bad guest: keeps a step counter in a global, and its output (the state, a CBOR uint
;; 1..23) depends on it. A fresh instance always answers 1; a warm one answers 2, 3, ...
;; so `checked` catches it the first time it compares (step.nondeterministic).
(module
  (memory (export "memory") 1)
  ;; d9d9f7 {"state": h'd9d9f7 <uint>'}: the uint is the byte at offset 14.
  (data (i32.const 0) "\d9\d9\f7\a1\65state\44\d9\d9\f7\00")
  (global $steps (mut i32) (i32.const 0))
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64)
    (global.set $steps (i32.rem_u (i32.add (global.get $steps) (i32.const 1)) (i32.const 24)))
    (i32.store8 (i32.const 14) (global.get $steps))
    (i64.const 15)))
