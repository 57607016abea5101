;; Bad guest: returns a 2 MiB output, over the default 1 MiB output_bytes_max
;; (step.output_too_large; the host refuses it before copying it out).
(module
  (memory (export "memory") 33)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64)
    (i64.const 0x200000)))
