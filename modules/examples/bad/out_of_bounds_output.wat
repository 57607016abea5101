;; Bad guest: points its output past the end of linear memory (step.output_malformed).
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64)
    (i64.const 0x0000FFF000000100)))
