;; Bad guest: imports WASI functions. Refused at load (wasm.imports_forbidden).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "step") (param i32 i32) (result i64) (i64.const 0)))
