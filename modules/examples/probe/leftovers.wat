;; Probe: reports what an earlier step could have left in its instance, as the state
;; [counter, pages, calls] (CBOR uints below 24): `counter` is a byte of linear memory outside
;; every data segment, incremented by each step; `pages` is the memory's size before this
;; step's `alloc` grew it by one page; `calls` is a global counting steps. A fresh instance
;; (a new store, a new linear memory) answers [1, 1, 1] every time; a warm one [2, 2, 2], ...
(module
  (memory (export "memory") 1)
  ;; d9d9f7 {"state": h'd9d9f7 [counter, pages, calls]'}: the three uints at offsets 15..17.
  (data (i32.const 0) "\d9\d9\f7\a1\65state\47\d9\d9\f7\83\00\00\00")
  (global $calls (mut i32) (i32.const 0))
  ;; The input goes into a page grown for it, so the memory grows on every step.
  (func (export "alloc") (param i32) (result i32)
    (i32.mul (memory.grow (i32.const 1)) (i32.const 65536)))
  (func (export "step") (param i32 i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store8 (i32.const 2048) (i32.add (i32.load8_u (i32.const 2048)) (i32.const 1)))
    (i32.store8 (i32.const 15) (i32.load8_u (i32.const 2048)))
    (i32.store8 (i32.const 16) (i32.sub (memory.size) (i32.const 1)))
    (i32.store8 (i32.const 17) (global.get $calls))
    (i64.const 18)))
