;; Bad guest (component ABI): exports `step` taking and returning a string instead of
;; list<u8> (wasm.abi_mismatch).
(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
    (func (export "step") (param i32 i32) (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "step") (param "input" string) (result string)
    (canon lift (core func $i "step")
      (memory (core memory $i "memory"))
      (realloc (core func $i "realloc")))))
