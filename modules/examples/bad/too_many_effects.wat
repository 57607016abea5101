;; Bad guest: a well-formed output with 1000 effects, over the default 64
;; (step.too_many_effects): {"state": null, "effects": [1000 x e], "domain_events": []}.
(module
  (memory (export "memory") 1)
  ;; header (22 bytes): d9d9f7 map(3) "state" null "effects" array(1000)
  (data (i32.const 0) "\d9\d9\f7\a3\65state\f6\67effects\99\03\e8")
  ;; one effect (29 bytes): {"effect": "demo/E@1", "params": h'd9d9f7f6'}
  (data (i32.const 64) "\a2\66effect\68demo/E@1\66params\44\d9\d9\f7\f6")
  ;; tail (15 bytes): "domain_events" array(0)
  (data (i32.const 128) "\6ddomain_events\80")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64)
    (local $at i32)
    (local $n i32)
    (memory.copy (i32.const 4096) (i32.const 0) (i32.const 22))
    (local.set $at (i32.const 4118))
    (loop $each
      (memory.copy (local.get $at) (i32.const 64) (i32.const 29))
      (local.set $at (i32.add (local.get $at) (i32.const 29)))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $each (i32.lt_u (local.get $n) (i32.const 1000))))
    (memory.copy (local.get $at) (i32.const 128) (i32.const 15))
    (local.set $at (i32.add (local.get $at) (i32.const 15)))
    (i64.or
      (i64.shl (i64.const 4096) (i64.const 32))
      (i64.extend_i32_u (i32.sub (local.get $at) (i32.const 4096))))))
