;; Bad guest (component ABI): imports a WASI interface. Refused at load
;; (wasm.imports_forbidden), like any component that imports anything.
(component
  (import "wasi:cli/environment@0.2.0" (instance
    (export "get-arguments" (func (result (list string))))))
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
    (func (export "step") (param i32 i32) (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (type $bytes (list u8))
  (func (export "step") (param "input" $bytes) (result $bytes)
    (canon lift (core func $i "step")
      (memory (core memory $i "memory"))
      (realloc (core func $i "realloc")))))
