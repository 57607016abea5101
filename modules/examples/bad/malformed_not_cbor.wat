;; Bad guest: returns bytes that are not CBOR at all (step.output_malformed).
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "not cbor")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64) (i64.const 8)))
