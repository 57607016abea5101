;; Bad guest: has memory and alloc but no step export (wasm.abi_mismatch).
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "run") (param i32 i32) (result i64) (i64.const 0)))
